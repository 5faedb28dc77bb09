"""``campaign-bot check`` on the bundled example, the committed schemas, the field-path to
line mapping, and the wheel's contents."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from evidence.bundle import load_campaign
from evidence.check import check_campaign
from evidence.cli import _all_schemas, app, schema_text
from evidence.findings import REVIEW_RULES
from evidence.lines import line_of

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"


def test_example_reproduces_seed_000() -> None:
    rep = check_campaign(EXAMPLE)
    arms = {(a.screen_id, a.arm): a for a in rep.arms}
    b5 = arms[("baseline-5s", "control")]
    assert (b5.median_client_wall_s, b5.warmup_client_wall_s, b5.measured_requests) == (
        814.064, [965.546, 855.532], 1)
    assert b5.lifecycle_problems[:4] == [f"worker rank {r} still running"
                                         for r in range(4)]
    assert "4 terminate action(s)" in b5.lifecycle_problems
    assert "4 kill action(s)" in b5.lifecycle_problems
    b15 = arms[("baseline-15s", "control")]
    assert (b15.median_client_wall_s, b15.warmup_client_wall_s) == (2475.906, [2597.2])
    assert not any("worker" in p or "action" in p for p in b15.lifecycle_problems)
    rl = "screen-resident-layers-24-5s"
    assert arms[(rl, "control")].median_client_wall_s == 173.211
    assert arms[(rl, "candidate")].median_client_wall_s == 365.884
    tp = "screen-tp2-sp2-5s"
    assert arms[(tp, "control")].median_client_wall_s == 166.572
    cand = arms[(tp, "candidate")]
    assert (cand.measured_requests, cand.measured_failed, cand.median_client_wall_s) == (
        1, 1, None)
    assert "container exit 1" in cand.lifecycle_problems
    assert arms[("screen-task-queue-l2-5s", "control")].median_client_wall_s == 168.956
    lc = load_campaign(EXAMPLE)
    [status] = lc.statuses
    assert status.model.execution == "queued" and set(status.model.samples.values()) == {0}
    assert not status.model.frozen
    assert rep.hash_errors == 0 and rep.external_digests == 5
    # integrity is clean; issue 3's review finds seed 000's stale status and failed lifecycles
    assert not [f for f in rep.problems if f.rule not in REVIEW_RULES], rep.findings
    assert rep.exit_code == 1


def test_example_is_what_the_builder_writes(tmp_path: Path) -> None:
    out = tmp_path / "ex"
    subprocess.run([sys.executable, str(ROOT / "examples" / "build_h3_ref2va_4x910b1.py"),
                    str(out)], check=True)
    want = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    have = {p.relative_to(EXAMPLE): p.read_bytes() for p in EXAMPLE.rglob("*") if p.is_file()}
    assert want.keys() == have.keys()
    assert [k for k in want if want[k] != have[k]] == []


def test_readme_command_one_runs_and_documents_its_exit_code() -> None:
    res = subprocess.run([sys.executable, "-c", "from evidence.cli import main; main()",
                          "check", "examples/h3-ref2va-4x910b1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert "Traceback" not in res.stderr
    assert "checked 24 hashes in 11 manifests, 0 errors" in res.stdout
    readme = (ROOT / "README.md").read_text()
    assert f"Command 1 exits **{res.returncode}**" in readme


def test_json_output_is_one_document() -> None:
    res = CliRunner().invoke(app, ["check", str(EXAMPLE), "--json"])
    rep = json.loads(res.stdout)
    assert rep["schema"] == "campaign-bot/check-report@1"
    assert {v["track"] for v in rep["verdicts"]} == {"5s-lossless", "15s-lossless",
                                                      "5s-lossy", "15s-lossy"}
    assert rep["exit_code"] == res.exit_code


def test_bad_usage_exits_2() -> None:
    assert CliRunner().invoke(app, ["check"]).exit_code == 2
    assert CliRunner().invoke(app, ["check", str(EXAMPLE), "--max-file-bytes", "0"]
                              ).exit_code == 2
    res = CliRunner().invoke(app, ["check", str(EXAMPLE / "campaign.toml")])
    assert res.exit_code == 2


@pytest.mark.parametrize("name", sorted(_all_schemas()))
def test_committed_schema_is_up_to_date(name: str) -> None:
    path = ROOT / "evidence" / "schemas" / f"{name}.json"
    assert path.exists(), f"run: campaign-bot schema {name} > {path.relative_to(ROOT)}"
    assert path.read_text() == schema_text(name) + "\n", (
        f"{path.relative_to(ROOT)} is out of date; regenerate with "
        f"`campaign-bot schema {name} > {path.relative_to(ROOT)}`")


def test_no_stray_schema_files() -> None:
    names = {p.stem for p in (ROOT / "evidence" / "schemas").glob("*.json")}
    assert names == set(_all_schemas())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                              max_size=4),
    max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(doc=st.dictionaries(st.text(max_size=8), json_values, min_size=1, max_size=5),
       indent=st.sampled_from([None, 1, 2, 4]))
def test_line_of_finds_every_key(doc: dict, indent: int | None) -> None:
    text = json.dumps(doc, indent=indent)
    lines = text.split("\n")
    for key in doc:
        line = line_of(text, (key,))
        assert line is not None
        assert json.dumps(key) + ":" in lines[line - 1]
    assert line_of(text, ()) == 1


def test_wheel_ships_every_package_and_the_schemas(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True,
                   timeout=300)
    [whl] = tmp_path.glob("campaign_bot-*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    for pkg in ("bot", "runners", "evidence", "templates"):
        assert f"{pkg}/__init__.py" in names
    for n in _all_schemas():
        assert f"evidence/schemas/{n}.json" in names
    assert any(n.endswith("entry_points.txt") for n in names)
    # install it (not editable) into a private target and run the CLI from there
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(whl)], check=True, capture_output=True, timeout=300)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import evidence, evidence.cli;"
            "assert evidence.__file__.startswith(sys.argv[1]), evidence.__file__;"
            "sys.argv = ['campaign-bot', 'schema', 'receipt']; evidence.cli.main()")
    res = subprocess.run([sys.executable, "-c", code, str(target)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["title"] == "Receipt"


def test_progress_bar_appears_only_after_the_delay() -> None:
    import io

    from rich.console import Console

    from evidence.cli import _LazyProgress

    buf = io.StringIO()
    slow = _LazyProgress(Console(file=buf, force_terminal=True, width=100), delay_s=3600)
    slow(10, 100)
    slow.stop()
    assert slow.bar is None and buf.getvalue() == ""
    fast = _LazyProgress(Console(file=buf, force_terminal=True, width=100), delay_s=0)
    fast(50 << 20, 100 << 20)
    fast.stop()
    assert "hashing" in buf.getvalue()


def test_committed_schemas_accept_the_example_documents() -> None:
    import tomllib

    import jsonschema

    def schema(name: str) -> dict:
        return json.loads((ROOT / "evidence" / "schemas" / f"{name}.json").read_text())

    lc = load_campaign(EXAMPLE)
    for d in lc.receipts:
        jsonschema.validate(json.loads(d.text), schema("receipt"))
    for sd in lc.statuses:
        jsonschema.validate(json.loads(sd.text), schema("status"))
    jsonschema.validate(tomllib.loads((EXAMPLE / "campaign.toml").read_text()),
                        schema("campaign"))
    rep = json.loads(CliRunner().invoke(app, ["check", str(EXAMPLE), "--json"]).stdout)
    jsonschema.validate(rep, schema("check-report"))
    bad = json.loads(lc.receipts[0].text)
    bad["arm"] = "treatment"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema("receipt"))


def test_check_of_a_repository_root_checks_each_campaign(tmp_path: Path) -> None:
    """``check REPO`` finds the campaigns through .github/campaign-bot.toml's [campaigns]
    paths, checks each in turn and exits with the worst status; --json gives one array."""
    import shutil
    import subprocess
    import sys

    repo = tmp_path / "repo"
    (repo / ".github").mkdir(parents=True)
    (repo / ".github" / "campaign-bot.toml").write_text('[campaigns]\npaths = ["c/*"]\n')
    shutil.copytree(EXAMPLE, repo / "c" / "h3")
    (repo / "c" / "notes").mkdir()  # no campaign.toml: not a campaign
    cli = [sys.executable, "-c", "from evidence.cli import main; main()", "check"]
    res = subprocess.run([*cli, str(repo)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stderr
    assert res.stdout.startswith("== c/h3\ncampaign h3-ref2va-4x910b1  (")
    assert res.stdout.rstrip().endswith(f"repository {repo}: 1 campaign(s) checked, exit 1")
    res = subprocess.run([*cli, str(repo), "--json"], capture_output=True, text=True,
                         timeout=120)
    (doc,) = json.loads(res.stdout)
    assert res.returncode == 1 and doc["campaign"] == "h3-ref2va-4x910b1"
    (repo / ".github" / "campaign-bot.toml").write_text('[campaigns]\npaths = ["../x"]\n')
    res = subprocess.run([*cli, str(repo)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.startswith("error: ") and "../x" in res.stderr


def test_check_judges_a_bundle_outside_its_campaign(tmp_path: Path) -> None:
    """``check BUNDLE --campaign DIR``: the bundle's receipts are judged under DIR's
    campaign.toml (verdicts per track); without it there is nothing to judge."""
    import shutil

    bundle = tmp_path / "artifact"
    shutil.copytree(EXAMPLE / "bundles" / "screen-tp2-sp2-5s", bundle)
    alone = json.loads(CliRunner().invoke(app, ["check", str(bundle), "--json"]).stdout)
    assert alone["campaign"] is None and alone["verdicts"] == []
    r = CliRunner().invoke(app, ["check", str(bundle), "--json", "--campaign", str(EXAMPLE)])
    rep = json.loads(r.stdout)
    assert rep["campaign"] == "h3-ref2va-4x910b1"
    assert {v["track"] for v in rep["verdicts"]} >= {"5s-lossless"}
    bad = CliRunner().invoke(app, ["check", str(bundle), "--campaign", str(tmp_path)])
    assert bad.exit_code == 2 and "no campaign.toml there" in bad.output
    own = CliRunner().invoke(app, ["check", str(EXAMPLE), "--campaign", str(EXAMPLE)])
    assert own.exit_code == 2 and "holds its own campaign.toml" in own.output
