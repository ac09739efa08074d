"""A non-editable install carries the committed tuning records and reads them; it tunes elsewhere."""
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDS = sorted((ROOT / "generated" / "tuning").glob("*/*.json"))

PROBE = """
import json, os
import fusedgrad
from fusedgrad.lowering import tuning_records
found = {}
for name in json.loads(os.environ["RECORDS"]):
    op, target, dtype = name.split(".")[:3]
    hit = tuning_records.find(op, target, dtype)
    found[name] = None if hit is None else [str(hit.path), hit.key, hit.exact]
print(json.dumps({"package": fusedgrad.__file__, "write": str(tuning_records.tuning_root()),
                  "search": [str(p) for p in tuning_records.search_roots()], "key": tuning_records.target_key("llvm"),
                  "found": found}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """fusedgrad built as a wheel and installed (no dependencies: they are this venv's) into a folder."""
    tmp = tmp_path_factory.mktemp("install")
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(tmp / "wheel"),
                    str(ROOT)], check=True)
    wheel = next((tmp / "wheel").glob("fusedgrad-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(tmp / "site"),
                    str(wheel)], check=True)
    return wheel, tmp / "site", tmp


def test_the_wheel_carries_the_record_summaries_only(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert RECORDS, "no committed tuning records under generated/tuning"
    for rec in RECORDS:
        assert f"fusedgrad/generated/tuning/{rec.parent.name}/{rec.name}" in names, rec
    assert not [n for n in names if n.endswith("database_tuning_record.json")]


def test_the_installed_package_reads_them_and_tunes_into_the_user_folder(installed):
    from fusedgrad.targets import llvm

    _, site, tmp = installed
    env = {k: v for k, v in os.environ.items() if k not in ("FUSEDGRAD_TUNING", "XDG_DATA_HOME",
                                                            "FUSEDGRAD_MCPU", "FUSEDGRAD_MTRIPLE")}
    env.update(PYTHONPATH=str(site), HOME=str(tmp / "home"), RECORDS=json.dumps([r.name for r in RECORDS]))
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=tmp, check=True, capture_output=True, text=True)
    got = json.loads(out.stdout.splitlines()[-1])
    shipped = site / "fusedgrad" / "generated" / "tuning"
    user = tmp / "home" / ".local" / "share" / "fusedgrad" / "tuning"
    assert Path(got["package"]).is_relative_to(site), got["package"]  # the installed copy, not the checkout
    assert Path(got["write"]) == user and [Path(p) for p in got["search"]] == [user, shipped]
    # every committed record this machine's class may use is found in the installed package
    arch = (llvm.host_triple() or "").split("-")[0]
    order = llvm.ISA_CLASSES.get(arch, ())
    mine = got["key"].split("-", 1)[1].rsplit("-", 1)[0]
    usable = [r for r in RECORDS if mine in order
              and any(r.parent.name.startswith(f"llvm-{c}-") for c in order[order.index(mine):])]
    for rec in usable:
        path, key, _ = got["found"][rec.name]
        assert Path(path).is_relative_to(shipped), (rec.name, path)
    assert not user.exists()  # reading never creates the user's folder
