"""A finished screen's bundle: fetched from its run's artifact and unpacked as untrusted data
(:func:`fetch_bundle`), verified (:func:`verify_bundle`: every manifest, and the runner's DSSE
signature against the campaign's trusted keys), read (:func:`read_bundle`) and judged
(:func:`judge_screen`, by :mod:`evidence.verdicts`)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from bot.features.screen.queue import Screen
from bot.features.screen.report import Decision
from bot.github import ArtifactInfo, GitHubError, GitHubPort, run_blocking
from bot.github.artifacts import ArtifactError, Limits, safe_extract
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
        arts = [a for a in run_blocking(gh.list_run_artifacts(s.run_id)) if not a.expired]
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
        data = run_blocking(
            gh.download_artifact(pick.id, limits.max_compressed, pick.size_in_bytes))
        safe_extract(data, Path(tmp.name) / "bundle", limits)
    except (ArtifactError, GitHubError) as exc:
        tmp.cleanup()
        if isinstance(exc, GitHubError) and exc.retryable:
            raise  # transient: the delivery is retried
        return FetchedBundle(None, f"artifact {pick.name!r} refused: {exc}")
    return FetchedBundle(Path(tmp.name) / "bundle", None, tmp)


@dataclass
class BundleCheck:
    """Integrity of an unpacked bundle: ``ok``, one-line ``summary``, ``problems``."""

    ok: bool
    summary: str
    problems: list[str]


def verify_bundle(root: Path, trusted_keys: bytes | None) -> BundleCheck:
    """Verify every manifest under ``root`` (:func:`evidence.manifest.verify_tree`) and the
    runner's DSSE signature against the campaign's trusted keys (:mod:`evidence.signing`).

    Any failure (mismatch, missing or extra file, bad or untrusted signature, no trusted keys)
    makes ``ok`` False with the reasons.
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
    sig_text = "signature not checked"
    if trusted_keys is None:
        problems.append(f"the campaign has no {TRUSTED_KEYS_FILE} on the default branch")
    else:
        try:
            sig_text, sig_problems = _verify_signature(root, trusted_keys)
        except Exception as exc:  # noqa: BLE001 - a bad signature file is a refusal
            sig_problems = [f"signature check failed: {type(exc).__name__}: {exc}"]
            sig_text = "signature REFUSED"
        problems += sig_problems
    summary = (
        f"Manifests: {res.hashes_ok} of {res.hashes_checked} hashes verified; {sig_text}."
    )
    # paths relative to the bundle: the bot's temporary directory means nothing to readers
    problems = [p.replace(f"{root}/", "").replace(str(root), ".") for p in problems]
    return BundleCheck(not problems, summary, problems)


def _verify_signature(root: Path, trusted_keys: bytes) -> tuple[str, list[str]]:
    """DSSE signature of the bundle against the campaign's trusted keys
    (:func:`evidence.signing.verify_bundle`): returns (summary, problems)."""
    from evidence import signing

    with tempfile.TemporaryDirectory(prefix="campaign-bot-keys-") as tmp:
        kf = Path(tmp) / TRUSTED_KEYS_FILE
        kf.write_bytes(trusted_keys)
        try:
            keys = signing.load_trusted_keys(kf)
        except signing.KeyFileError as exc:
            return "signature not checked", [
                f"{TRUSTED_KEYS_FILE} of the campaign: {str(exc).split(': ', 1)[-1]}"
            ]
    problems = signing.verify_bundle(root, keys)
    if problems:
        return "signature REFUSED", [f"signature: {p}" for p in problems]
    try:
        env = json.loads((root / signing.ATTESTATION_FILE).read_text())
        kid = next((x.get("keyid") for x in env.get("signatures", []) if x.get("keyid") in keys),
                   None)
    except (OSError, ValueError, AttributeError):
        kid = None
    return f"signed by trusted runner key {str(kid)[:19]}", []


def read_bundle(root: Path) -> tuple[list[Receipt], list[tuple[str, MediaReport]], list[str]]:
    """Receipts and media reports found under ``root`` (by their ``schema`` field), and the
    problems of documents that claim a schema but do not validate."""
    receipts: list[Receipt] = []
    media: list[tuple[str, MediaReport]] = []
    problems: list[str] = []
    for p in sorted(root.rglob("*.json")):
        if p.is_symlink() or p.stat().st_size > 16 * 1024 * 1024:
            continue
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(obj, dict):
            continue
        rel = p.relative_to(root).as_posix()
        schema = obj.get("schema")
        try:
            if schema == "campaign-bot/receipt@1":
                receipts.append(Receipt.model_validate(obj))
            elif schema == "campaign-bot/media-report@1":
                media.append((rel, MediaReport.model_validate(obj)))
        except ValidationError as exc:
            e = exc.errors()[0]
            problems.append(f"{rel}: field {'.'.join(map(str, e['loc']))}: {e['msg']}")
    return receipts, media, problems


def judge_screen(
    scope: CampaignScope, s: Screen, receipts: list[Receipt],
    media: list[tuple[str, MediaReport]], load_problems: list[str],
) -> Decision:
    """The verdict of this screen alone, by :func:`evidence.verdicts.judge` (exact bounds,
    gates, reasons); load problems make it INCONCLUSIVE.  A control-vs-control screen is
    judged on repeatability instead (:func:`evidence.verdicts.control_repeatability`):
    REPEATABLE, NOT REPEATABLE (lossless verdicts are then INCONCLUSIVE) or UNPROVEN."""
    from evidence.verdicts import Evidence, ReportIn, control_repeatability, judge

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
    ev = Evidence.from_lists(scope, mine, [ReportIn(m, p) for p, m in media])
    verdicts = [v for v in judge(ev) if v.track == s.track and v.candidate == s.candidate]
    if not verdicts:
        return Decision("INCONCLUSIVE", [f"no candidate-arm receipts of {s.candidate}",
                                         *load_problems])
    v = verdicts[0]
    reasons = [f"{r.code}: {r.text}" for r in v.reasons] + load_problems
    verdict = "INCONCLUSIVE" if load_problems else v.verdict
    return Decision(verdict, reasons, v.ratio, v.lower, v.upper,
                    no_ratio_reason="no qualified session median in one arm")
