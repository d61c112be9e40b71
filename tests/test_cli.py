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
import iotable.bundle.bundle
from iotable import Domain, TableNetwork, precompute, save
from iotable.cli import main

from .optional import require_graphviz, require_program
from .test_bundle import stamp
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
    version = iotable.bundle.bundle.FORMAT_VERSION
    assert (
        first
        == f"{path}: iotable bundle (format version {version}, written by iotable {iotable.__version__}), one network"
    )
    assert rest.rstrip("\n") == net.summary()
    assert result.stderr == ""


def test_check_passes_a_good_bundle(network: tuple[TableNetwork, Path]) -> None:
    """``iotable check`` prints one OK line with the checksums, file, table and golden sample counts, and exits 0."""
    net, path = network
    result = run_cli("check", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"OK: {path}: manifest checksum matches; {len(net.tables) + 2 + 2} array file(s) match their checksums; "
        f"{len(net.tables)} table(s); plans, tables and graph agree; the graph passes its checks; 8 golden sample(s) "
        "reproduce\n"
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
    """A manifest whose graph breaks an invariant fails the check, naming the edge (the checksum stamped anew)."""
    _, path = network
    broken = Path(shutil.copytree(path, tmp_path / "broken"))
    manifest = (broken / "manifest.json").read_text(encoding="utf-8")
    (broken / "manifest.json").write_text(manifest.replace('"consumer_port": 0', '"consumer_port": 1', 1))
    result = run_cli("check", str(broken))
    assert result.returncode == 1 and "manifest.json: checksum mismatch" in result.stderr
    stamp(broken)
    result = run_cli("check", str(broken))
    assert result.returncode == 1
    assert "the graph fails its checks" in result.stderr and "edges drive its input port(s) [1]" in result.stderr


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
    assert capsys.readouterr().out == (
        f"OK: {path}: manifest checksum matches; 2 array file(s) match their checksums; 2 table(s); plans and tables "
        "agree\n"
    )


def test_help_and_usage_errors() -> None:
    """``--help`` documents every command; a missing command is a usage error (exit 2)."""
    result = run_cli("--help")
    assert result.returncode == 0
    assert all(f"    {command} " in result.stdout for command in ("info", "check", "dot", "pla"))
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


def call(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """``main(args)`` in this process, its exit status and output shaped as a finished subprocess."""
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out, out.err)


def assert_clean_error(result: subprocess.CompletedProcess[str], command: str, *words: str) -> None:
    """Exit status 1, nothing on stdout, one ``iotable COMMAND: error:`` message with ``words`` and no traceback."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"iotable {command}: error: ") and result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)


def test_dot_prints_the_graph(network: tuple[TableNetwork, Path]) -> None:
    """``iotable dot BUNDLE`` prints the network's graph in DOT, as Graph.to_dot writes it."""
    net, path = network
    result = run_cli("dot", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout == net.graph.to_dot() + "\n" and result.stderr == ""


def test_dot_writes_dot_and_svg_files(network: tuple[TableNetwork, Path], tmp_path: Path) -> None:
    """``-o FILE.dot`` writes the DOT text and ``-o FILE.svg`` the picture Graphviz draws from it."""
    net, path = network
    result = run_cli("dot", str(path), "-o", str(tmp_path / "net.gv"))
    assert result.returncode == 0 and result.stdout == f"wrote {tmp_path / 'net.gv'}\n"
    assert (tmp_path / "net.gv").read_text(encoding="utf-8") == net.graph.to_dot()
    require_graphviz()
    result = run_cli("dot", str(path), "--output", str(tmp_path / "net.svg"))
    assert result.returncode == 0, result.stderr
    svg = (tmp_path / "net.svg").read_text(encoding="utf-8")
    assert svg.startswith("<svg") and all(f"<title>{n.name}</title>" in svg for n in net.graph.nodes)


def test_dot_errors_are_clean(
    network: tuple[TableNetwork, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad paths, a layer bundle and an unknown output format each exit 1 with one message that says what to do."""
    _, path = network
    layer = save(precompute(nn.Conv1d(2, 2, 2, groups=2), input_domain=Domain.uniform(1)), tmp_path / "layer")
    cases = [
        (("dot", str(tmp_path / "nowhere")), ("does not exist", "bundle directory written by iotable.save")),
        (("dot", str(layer)), ("holds one layer ('Conv1d')", "needs a network bundle")),
        (("dot", str(path), "-o", str(tmp_path / "net.png")), ("cannot tell the format", "*.svg", "*.dot")),
        (("dot", str(path), "-o", str(tmp_path / "no" / "net.svg")), ("does not exist; create it first",)),
        (("dot", str(path), "-o", str(tmp_path)), ("cannot tell the format",)),
    ]
    assert_clean_error(run_cli(*cases[0][0]), "dot", *cases[0][1])  # as a command, once
    for args, words in cases:
        assert_clean_error(call(capsys, *args), "dot", *words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["layer"]  # nothing written on failure


def test_dot_without_graphviz_names_the_extra(network: tuple[TableNetwork, Path], tmp_path: Path) -> None:
    """Asking for an SVG where Graphviz cannot be found exits 1 with a message that says how to install it."""
    _, path = network
    code = "import sys; sys.modules['graphviz'] = None; from iotable.cli import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, "-c", code, "dot", str(path), "-o", str(tmp_path / "net.svg")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert_clean_error(result, "dot", "'graphviz'", 'pip install "iotable[notebook]"')
    assert not (tmp_path / "net.svg").exists()


def test_pla_exports_every_table(network: tuple[TableNetwork, Path], tmp_path: Path) -> None:
    """``iotable pla BUNDLE DIR`` writes one PLA file per table, the same files export_pla writes."""
    net, path = network
    result = run_cli("pla", str(path), str(tmp_path / "out"), "--dont-cares", "implicit")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote {len(net.tables)} PLA file(s) to {tmp_path / 'out'}\n"
    expected = iotable.export_pla(net, tmp_path / "expected", dont_cares="implicit")
    written = sorted((tmp_path / "out").iterdir())
    assert [p.name for p in written] == sorted(p.name for p in expected)
    assert all(p.read_bytes() == (tmp_path / "expected" / p.name).read_bytes() for p in written)


def test_pla_errors_are_clean(
    network: tuple[TableNetwork, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing bundle, an output path that is a file and tables of raw values exit 1 with one clear message."""
    _, path = network
    raw = save(precompute(nn.Conv1d(2, 2, 2, groups=2), input_domain=Domain.uniform(1)), tmp_path / "raw")
    file = tmp_path / "file.txt"
    file.write_text("not a folder", encoding="utf-8")
    assert_clean_error(run_cli("pla", str(tmp_path / "nowhere"), str(tmp_path / "out")), "pla", "does not exist")
    assert_clean_error(call(capsys, "pla", str(path), str(file)), "pla", "exists and is not a directory")
    assert_clean_error(
        call(capsys, "pla", str(raw), str(tmp_path / "out")), "pla", "holds raw values", "end the layer in a quantizer"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("command", "words"),
    [("dot", ("Graphviz DOT", "-o FILE", "apt-get install graphviz")), ("pla", ("PLA", "DIRECTORY", "--dont-cares"))],
)
def test_new_commands_have_help(command: str, words: tuple[str, ...]) -> None:
    """``iotable dot --help`` and ``iotable pla --help`` describe what they write and their options."""
    result = run_cli(command, "--help")
    assert result.returncode == 0 and result.stderr == ""
    text = " ".join(result.stdout.split())
    for word in words:
        assert word in text, word


# -- cost ---------------------------------------------------------------------------------------------------------


def test_cost_prints_the_report_and_saves_the_results(network: tuple[TableNetwork, Path], tmp_path: Path) -> None:
    """``iotable cost --save`` prints the LUT report and stores the results; a rerun maps nothing."""
    require_program("berkeley-abc", package="berkeley-abc")
    net, path = network
    copy = Path(shutil.copytree(path, tmp_path / "mlp"))
    command = [sys.executable, "-m", "iotable", "cost", str(copy), "--workers", "1"]
    result = subprocess.run([*command, "--save"], capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "input bits" in result.stdout and "registers" in result.stdout and "pinned flow" in result.stdout
    assert "saved the mapping results of" in result.stdout and result.stderr == ""
    total = next(line for line in result.stdout.splitlines() if line.startswith("total")).split()
    units = net.liveness.layers(net.graph)  # the live tables alone are mapped and counted
    assert int(total[4]) == sum(
        int(layer.plan.lut_estimates()[units[name]].sum()) for name, layer in net.layers.items()
    )
    assert int(total[2]) == net.liveness.dead() and f"dead: {net.liveness.dead()} tables" in result.stdout
    distinct = int(re.search(r"; (\d+) distinct table\(s\)", result.stdout).group(1))
    assert len(iotable.load(copy).luts) == distinct > 0
    again = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    assert again.returncode == 0 and " 0 mapped, " in again.stdout, again.stderr


def test_cost_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    """``iotable cost`` on a layer bundle with --save, or without ABC, exits 1 with one line naming the fix."""
    layer = save(precompute(nn.Conv1d(2, 2, kernel_size=2, groups=2), input_domain=Domain.uniform(1)), tmp_path / "l")
    assert main(["cost", str(layer), "--save"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "iotable cost: error: --save:" in err and "network bundles" in err
    net = save(precompute(mlp(), input_domain=U2, example_input=torch.zeros(1, 12)), tmp_path / "net")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["cost", str(net), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "apt-get install berkeley-abc" in err and "Traceback" not in err
