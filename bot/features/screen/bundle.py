"""A finished screen's bundle: fetched from its run's artifact and unpacked as untrusted data
(:func:`fetch_bundle`), verified (:func:`verify_bundle`: every manifest, and the runner's DSSE
signature against the campaign's trusted keys), read (:func:`read_bundle`: only the JSON
documents the signed payload manifest lists, through :mod:`evidence.safejson`) and judged
(:func:`judge_screen`, by :mod:`evidence.verdicts`).  The caller
(:func:`bot.features.screen.results.finish_screen`) turns any exception raised while downloading,
unpacking, verifying or judging into a REFUSED result; see docs/security.md."""

from __future__ import annotations

import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bot.features.screen.queue import Screen
from bot.features.screen.report import Decision
from bot.github import ArtifactInfo, GitHubError, GitHubPort
from bot.github.artifacts import ArtifactError, Limits, safe_extract
from evidence.manifest import DEFAULT_MAX_DOCUMENT_BYTES
from evidence.models import CampaignScope, MediaReport, Receipt

TRUSTED_KEYS_FILE = "trusted-keys.pem"
"""Runner public keys a campaign trusts (PEM ed25519 public key blocks, ``#`` comments; the
format of ``campaign-bot check --trusted-keys``), beside its campaign.toml on the default
branch: keys in a PR are never trusted."""


@dataclass
class FetchedBundle:
    """The unpacked artifact (``root``) or why there is none (``problem``)."""

    root: Path | None
    problem: str | None
    _tmp: tempfile.TemporaryDirectory[str] | None = None
    artifact: str | None = None
    """The artifact's name (where files not committed stay)."""

    def cleanup(self) -> None:
        """Remove the unpacked files."""
        if self._tmp is not None:
            self._tmp.cleanup()


def fetch_bundle(gh: GitHubPort, s: Screen, limits: Limits) -> FetchedBundle:
    """Download the run's bundle artifact (the one named after the request id, else the only
    one) and unpack it safely into a temporary directory."""
    if s.run_id is None:
        return FetchedBundle(None, "no workflow run")
    try:
        arts = [a for a in gh.list_run_artifacts(s.run_id) if not a.expired]
    except Exception as exc:  # noqa: BLE001
        return FetchedBundle(None, f"cannot list artifacts: {type(exc).__name__}")
    pick: ArtifactInfo | None = None
    for a in arts:
        if s.request_id in a.name:
            pick = a
    if pick is None and len(arts) == 1:
        pick = arts[0]
    if pick is None:
        return FetchedBundle(None, f"the run left no bundle artifact ({len(arts)} artifacts)")
    tmp = tempfile.TemporaryDirectory(prefix="campaign-bot-bundle-")
    try:
        data = gh.download_artifact(pick.id, limits.max_compressed, pick.size_in_bytes)
        safe_extract(data, Path(tmp.name) / "bundle", limits)
    except (ArtifactError, GitHubError) as exc:
        tmp.cleanup()
        if isinstance(exc, GitHubError) and exc.retryable:
            raise  # transient: the delivery is retried
        return FetchedBundle(None, f"artifact {pick.name!r} refused: {exc}")
    return FetchedBundle(Path(tmp.name) / "bundle", None, tmp, pick.name)


@dataclass
class BundleCheck:
    """Integrity of an unpacked bundle: ``ok``, one-line ``summary``, ``problems``, and the
    JSON documents the signature covers (``documents``, bundle-relative POSIX paths listed in
    the signed payload manifest; empty unless ``ok``): the only files the bot reads."""

    ok: bool
    summary: str
    problems: list[str]
    documents: list[str] = field(default_factory=list)
    predicate: dict[str, Any] = field(default_factory=dict)
    """The signed statement's predicate (empty unless the signature verified)."""


def verify_bundle(root: Path, trusted_keys: bytes | None) -> BundleCheck:
    """Verify every manifest under ``root`` (:func:`evidence.manifest.verify_tree`) and the
    runner's DSSE signature against the campaign's trusted keys
    (:func:`evidence.signing.check_signed_bundle`: the signature covers every file present,
    in every directory).

    Any failure (mismatch, missing or extra file, a file the signature does not cover, bad or
    untrusted signature, no trusted keys) makes ``ok`` False with the reasons, and then no
    document is listed: nothing of a refused bundle is read.
    """
    from evidence.manifest import verify_tree

    problems: list[str] = []
    res = verify_tree(root)
    if res.hashes_checked == 0:
        problems.append("the bundle carries no manifest")
    if res.errors or res.extra:
        problems.append(
            f"manifest check failed: {res.mismatched} mismatched, {res.missing} missing, "
            f"{res.extra} extra, {res.unsafe} unsafe, {res.malformed} malformed"
        )
        for f in res.findings[:5]:
            if f.severity in ("P0", "P1"):
                problems.append(f"{f.path}: {f.message}")
    from evidence.signing import files_with_private_keys

    problems += [f"{rel}: holds private-key material; a bundle never carries a key (a "
                 "leaked runner key signs anything), refused" for rel in
                 files_with_private_keys(root)]
    sig_text = "signature not checked"
    documents: list[str] = []
    predicate: dict[str, Any] = {}
    if trusted_keys is None:
        problems.append(f"the campaign has no {TRUSTED_KEYS_FILE} on the default branch")
    else:
        try:
            sig_text, sig_problems, documents, predicate = _verify_signature(root,
                                                                             trusted_keys)
        except Exception as exc:  # noqa: BLE001 - a bad signature file is a refusal
            sig_problems = [f"signature check failed: {type(exc).__name__}: {exc}"]
            sig_text = "signature REFUSED"
        problems += sig_problems
    summary = (
        f"Manifests: {res.hashes_ok} of {res.hashes_checked} hashes verified; {sig_text}."
    )
    # paths relative to the bundle: the bot's temporary directory means nothing to readers
    problems = [p.replace(f"{root}/", "").replace(str(root), ".") for p in problems]
    return BundleCheck(not problems, summary, problems, documents if not problems else [],
                       predicate if not problems else {})


def _verify_signature(root: Path, trusted_keys: bytes
                      ) -> tuple[str, list[str], list[str], dict[str, Any]]:
    """DSSE signature of the bundle against the campaign's trusted keys: returns (summary,
    problems, the signed JSON documents (:func:`evidence.signing.verified_documents`), the
    signed predicate)."""
    from evidence import signing

    with tempfile.TemporaryDirectory(prefix="campaign-bot-keys-") as tmp:
        kf = Path(tmp) / TRUSTED_KEYS_FILE
        kf.write_bytes(trusted_keys)
        try:
            keys = signing.load_trusted_keys(kf)
        except signing.KeyFileError as exc:
            return "signature not checked", [
                f"{TRUSTED_KEYS_FILE} of the campaign: {str(exc).split(': ', 1)[-1]}"
            ], [], {}
    res = signing.check_signed_bundle(root, keys)
    if not res.ok:
        return "signature REFUSED", [f"signature: {p}" for p in res.messages()], [], {}
    return (f"signed by trusted runner key {str(res.key_id)[:19]}", [], res.documents(),
            res.predicate)


def scope_problems(predicate: dict[str, Any], scope_blob: str, candidate: str | None
                   ) -> list[str]:
    """Why a verified bundle does not measure what the screen asked for, from its signed
    predicate: the control, protocol, pool and serving settings must come from the default
    branch's ``campaign.toml`` (``scope_frozen`` true and ``scope_blob`` equal to that file's
    git blob SHA, ``scope_blob`` here), and the candidate must be the one the command named
    (``candidate``; None for a control-only screen).  Empty when both hold."""
    out: list[str] = []
    got = predicate.get("scope_blob")
    if predicate.get("scope_frozen") is not True or got != scope_blob:
        out.append("the runner did not take the control from the default branch's "
                   f"campaign.toml (git blob {scope_blob[:12]}): the signed statement names "
                   f"{str(got)[:12] if got else 'no scope file'}"
                   + ("" if predicate.get("scope_frozen") is True else
                      ", not pinned at dispatch (an older screen workflow or runner?)")
                   + "; a pull request may define only its candidate")
    if predicate.get("candidate") != candidate:
        out.append(f"the bundle screens candidate {predicate.get('candidate')!r}, the command "
                   f"named {candidate!r}")
    return out


MAX_DOCUMENT_BYTES = DEFAULT_MAX_DOCUMENT_BYTES
"""Largest receipt or media report read from a bundle (bytes, 8 MiB: the cap of
``campaign-bot check --max-document-bytes``); a larger signed document is a load problem."""


@dataclass
class BundleDocuments:
    """What :func:`read_bundle` took from a verified bundle: ``receipts``, ``media`` reports
    (with their paths), ``problems`` of documents that claim a schema they do not follow, and
    ``unreadable``: documents that could not be read at all (too large, not a regular file,
    not UTF-8 JSON, nested too deeply), each naming the file."""

    receipts: list[Receipt] = field(default_factory=list)
    media: list[tuple[str, MediaReport]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


def read_bundle(root: Path, documents: list[str],
                max_document_bytes: int = MAX_DOCUMENT_BYTES) -> BundleDocuments:
    """Receipts and media reports among ``documents`` (bundle-relative paths the signature
    covers, :attr:`BundleCheck.documents`; nothing else under ``root`` is opened), told apart
    by their ``schema`` field.  Each document is read whole only when it is a regular file
    of at most ``max_document_bytes``, and parsed with
    :func:`evidence.safejson.loads_document` (nesting limit
    :data:`evidence.safejson.MAX_JSON_DEPTH`; a key twice in one object is refused, as
    ``campaign-bot check`` refuses it)."""
    from evidence import safejson

    out = BundleDocuments()
    for rel in documents:
        p = root / rel
        try:
            st = p.lstat()
            if not stat.S_ISREG(st.st_mode):
                out.unreadable.append(f"{rel}: not a regular file; not read")
                continue
            if st.st_size > max_document_bytes:
                out.unreadable.append(f"{rel}: {st.st_size} bytes, over the "
                                      f"{max_document_bytes}-byte document limit; not read")
                continue
            obj = safejson.loads_document(p.read_bytes())
        except OSError as exc:
            out.unreadable.append(f"{rel}: cannot read: {exc.strerror or exc}")
            continue
        except ValueError as exc:  # not UTF-8, not JSON, nested too deeply, a duplicate key
            out.unreadable.append(f"{rel}: not readable JSON: {str(exc)[:200]}")
            continue
        if not isinstance(obj, dict):
            continue
        schema = obj.get("schema")
        try:
            if schema == "campaign-bot/receipt@1":
                out.receipts.append(Receipt.model_validate(obj))
            elif schema == "campaign-bot/media-report@1":
                out.media.append((rel, MediaReport.model_validate(obj)))
        except ValidationError as exc:
            e = exc.errors()[0]
            out.problems.append(f"{rel}: field {'.'.join(map(str, e['loc']))}: {e['msg']}")
    return out


def judge_screen(
    scope: CampaignScope, s: Screen, receipts: list[Receipt],
    media: list[tuple[str, MediaReport]], load_problems: list[str],
    prior: Sequence[Receipt] = (), prior_media: Sequence[tuple[str, MediaReport]] = (),
) -> Decision:
    """The verdict of this screen, by :func:`evidence.verdicts.judge` (exact bounds, gates,
    reasons); load problems make it INCONCLUSIVE.  ``prior``/``prior_media``: the verified
    receipts and media reports of the earlier screens it is judged with (a follow-up's
    earlier looks, a confirmation's earlier screens:
    :func:`bot.features.screen.followup.prior_receipts`); empty: this screen alone.  The
    decision's ``memo`` keeps what a later screen needs (the projected follow-up, the
    confirmation state).  A control-vs-control screen is
    judged on repeatability instead (:func:`evidence.verdicts.control_repeatability`):
    REPEATABLE, NOT REPEATABLE (lossless verdicts are then INCONCLUSIVE) or UNPROVEN."""
    from evidence.verdicts import Evidence, ReportIn, control_repeatability, judge

    if s.candidate_revision is not None:  # a revision screen: evidence.revisions
        from evidence.revisions import revision_scope

        scope = revision_scope(scope, s.control_revision, s.candidate_revision)
    mine = [r for r in receipts if r.track == s.track]
    if not mine:
        return Decision("INCONCLUSIVE", ["no receipts for this track in the bundle",
                                         *load_problems])
    if s.kind == "control":
        controls = [r for r in mine if r.arm == "control"]
        state, why = control_repeatability(controls, [m for _, m in media])
        problems = [f"session {r.slot + 1}: {p}" for r in controls
                    for p in r.lifecycle.problems()]
        verdict = {"established": "REPEATABLE", "differs": "NOT REPEATABLE"}.get(
            state, "UNPROVEN")
        if problems and verdict == "REPEATABLE":
            verdict = "UNPROVEN"
        return Decision(verdict, [why, *problems, *load_problems],
                        no_ratio_reason="a control-vs-control screen has no candidate arm")
    earlier = [r for r in prior if r.track == s.track]
    ev = Evidence.from_lists(scope, [*earlier, *mine],
                             [ReportIn(m, p) for p, m in [*prior_media, *media]])
    verdicts = [v for v in judge(ev) if v.track == s.track and v.candidate == s.candidate]
    if not verdicts:
        return Decision("INCONCLUSIVE", [f"no candidate-arm receipts of {s.candidate}",
                                         *load_problems])
    v = verdicts[0]
    again = f"`/screen continue {s.label}` queues it"
    reasons = [f"{r.code}: {r.text}".replace("`/screen continue` queues it", again)
               for r in v.reasons] + load_problems
    verdict = "INCONCLUSIVE" if load_problems else v.verdict
    memo: dict[str, Any] = {}
    if not load_problems:
        memo["followup"] = v.followup.model_dump(mode="json") if v.followup else None
        memo["confirmation"] = v.confirmation
        if v.confirmation is not None:
            reasons.append(f"CONFIRMATION: {v.shown}: {v.confirmation_text}" + (
                f"; `/screen confirm {s.candidate} track={s.track}` queues the "
                "confirmation screen" if v.confirmation == "provisional" else ""))
    return Decision(verdict, reasons, v.ratio, v.lower, v.upper,
                    no_ratio_reason="no qualified session median in one arm",
                    shown=None if load_problems else v.shown, memo=memo)
