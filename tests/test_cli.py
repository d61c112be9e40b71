"""The command line: ``iotable info`` and ``iotable check`` on good and damaged bundles, with exit codes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import iotable
from iotable import Domain, TableNetwork, precompute, save
from iotable.cli import main

from .test_network import U2, mlp

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m iotable ARGS`` in a fresh interpreter."""
    return subprocess.run([sys.executable, "-m", "iotable", *args], capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> tuple[TableNetwork, Path]:
    net = precompute(mlp(), input_domain=U2, example_input=torch.zeros(1, 12))
    return net, save(net, tmp_path_factory.mktemp("cli") / "mlp")


def test_info_prints_the_summary(network: tuple[TableNetwork, Path]) -> None:
    """``iotable info`` prints the bundle's format line and the network summary, and exits 0."""
    net, path = network
    result = run_cli("info", str(path))
    assert result.returncode == 0, result.stderr
    first, rest = result.stdout.split("\n", 1)
    version = iotable.bundle.FORMAT_VERSION
    assert (
        first
        == f"{path}: iotable bundle (format version {version}, written by iotable {iotable.__version__}), one network"
    )
    assert rest.rstrip("\n") == net.summary()
    assert result.stderr == ""


def test_check_passes_a_good_bundle(network: tuple[TableNetwork, Path]) -> None:
    """``iotable check`` prints one OK line with the file and table counts, and exits 0."""
    net, path = network
    result = run_cli("check", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"OK: {path}: {len(net.tables) + 2} array file(s) match their checksums; {len(net.tables)} table(s); "
        "plans, tables and graph agree; the graph passes its checks\n"
    )


def test_check_fails_a_corrupted_bundle(network: tuple[TableNetwork, Path], tmp_path: Path) -> None:
    """A flipped byte makes ``iotable check`` (and ``info``) exit 1 with the file and the reason on stderr."""
    _, path = network
    broken = Path(shutil.copytree(path, tmp_path / "broken"))
    rel = "tables/layer1/unit2.outputs.npy"
    data = bytearray((broken / rel).read_bytes())
    data[-1] ^= 0xFF
    (broken / rel).write_bytes(bytes(data))
    for command in ("check", "info"):
        result = run_cli(command, str(broken))
        assert result.returncode == 1 and result.stdout == ""
        assert re.match(rf"iotable {command}: error: .*{re.escape(rel)}: checksum mismatch", result.stderr)


def test_check_fails_a_broken_graph(network: tuple[TableNetwork, Path], tmp_path: Path) -> None:
    """A manifest whose graph breaks an invariant fails the check, naming the edge."""
    _, path = network
    broken = Path(shutil.copytree(path, tmp_path / "broken"))
    manifest = (broken / "manifest.json").read_text(encoding="utf-8")
    (broken / "manifest.json").write_text(manifest.replace('"consumer_port": 0', '"consumer_port": 1', 1))
    result = run_cli("check", str(broken))
    assert result.returncode == 1
    assert "the graph fails its checks" in result.stderr and "'0' has 1 input port(s)" in result.stderr


def test_check_fails_a_missing_bundle(tmp_path: Path) -> None:
    """A path with no bundle exits 1 and says what is missing."""
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_cli("check", str(empty))
    assert result.returncode == 1 and "manifest.json: missing" in result.stderr


def test_layer_bundles_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``main()`` handles a one-layer bundle: info prints the unit table, check counts its tables."""
    layer = precompute(nn.Conv1d(2, 2, kernel_size=2, groups=2), input_domain=Domain.uniform(1))
    path = save(layer, tmp_path / "layer")
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "one layer 'Conv1d'" in out and layer.summary() in out
    assert main(["check", str(path)]) == 0
    assert capsys.readouterr().out.startswith(f"OK: {path}: 2 array file(s) match their checksums; 2 table(s)")


def test_help_and_usage_errors() -> None:
    """``--help`` documents both commands; a missing command is a usage error (exit 2)."""
    result = run_cli("--help")
    assert result.returncode == 0 and "info" in result.stdout and "check" in result.stdout
    result = run_cli("check", "--help")
    assert result.returncode == 0 and "sha256" in result.stdout and "BUNDLE" in result.stdout
    result = run_cli()
    assert result.returncode == 2 and "required: COMMAND" in result.stderr
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"iotable {iotable.__version__}"


def test_console_script_is_declared() -> None:
    """pyproject.toml installs the ``iotable`` command, pointing at ``iotable.cli:main``."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^\[project\.scripts\]\niotable = "iotable\.cli:main"$', text, flags=re.MULTILINE)
