"""The DeepSpeed op cache: one key shared by CI, the main job and the tests, and a build that says
what it builds and why (no deepspeed needed here)."""
import json
from pathlib import Path

from oracle.compare.targets import deepspeed as dst

ROOT = Path(__file__).resolve().parent.parent


def test_the_key_names_versions_simd_and_install_folders():
    key = dst.cache_key()
    assert set(key) == {"python", "torch", "deepspeed", "simd", "torch_dir", "deepspeed_dir"}
    name = dst.cache_key_name(key)
    assert name == dst.cache_key_name(dict(key)) and "+" not in name
    assert name.startswith(f"py{key['python'].replace('.', '')}-torch")
    # another venv (same versions, other paths) gets its own folder instead of rebuilding this one's
    assert dst.cache_key_name({**key, "torch_dir": "/elsewhere/torch"}) != name
    assert dst.default_extensions_dir().endswith(name)


def test_build_reason_says_why(tmp_path):
    key = {**dst.cache_key(), "deepspeed": "0.19.8", "deepspeed_dir": "/venv/deepspeed"}
    assert "no build of it" in dst.build_reason("cpu_adam", str(tmp_path), key)
    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "cpu_adam" / "cpu_adam.so").write_bytes(b"")
    assert "no record of what it was built for" in dst.build_reason("cpu_adam", str(tmp_path), key)
    dst._stamp("cpu_adam", str(tmp_path), key)
    assert dst.build_reason("cpu_adam", str(tmp_path), key) is None
    other = {**key, "deepspeed_dir": "/other-venv/deepspeed"}
    why = dst.build_reason("cpu_adam", str(tmp_path), other)
    assert "another setup" in why and "'/venv/deepspeed' -> '/other-venv/deepspeed'" in why
    assert json.loads((tmp_path / "cpu_adam" / dst.STAMP).read_text())["deepspeed"] == "0.19.8"


def test_ci_builds_into_the_shared_cache():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "TORCH_EXTENSIONS_DIR=" not in ci, "CI must not build into a folder of its own"
    assert "bash scripts/build_deepspeed_ops.sh\n" in ci
    script = (ROOT / "scripts" / "build_deepspeed_ops.sh").read_text()
    assert "--print-dir" in script and "--print-key" in script
