"""Without PyTorch: decentlearn imports and runs, and `--model torch:...` says in one line how to
install the extra (exit 2). Runs whether or not torch is installed: the child process blocks the
import of torch with ``sys.modules['torch'] = None``."""

import subprocess
import sys
import textwrap
from pathlib import Path

import decentlearn

ROOT = str(Path(decentlearn.__file__).resolve().parent.parent)


def _run_without_torch(code: str) -> subprocess.CompletedProcess:
    prelude = f"import sys\nsys.path.insert(0, {ROOT!r})\nsys.modules['torch'] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=120)


def test_cli_torch_model_without_torch_is_one_line_exit_2():
    p = _run_without_torch("""
        from decentlearn.cli import main
        sys.exit(main(["run", "--model", "torch:resnet20", "--rounds", "1", "--quiet"]))
    """)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr
    assert 'pip install "decentlearn[torch]"' in lines[0]
    assert "--model torch:resnet20" in lines[0]


def test_decentlearn_works_without_torch():
    p = _run_without_torch("""
        import decentlearn
        from decentlearn.sim import simulate
        r = simulate(peers=4, rounds=2, eval_every=2, model="mlp:16", threads=1)
        assert 0 <= r.summary["test_accuracy_mean"] <= 1
        try:
            decentlearn.nn.make_model("torch:mlp", (1, 8, 8), 10)
        except ImportError as e:
            assert 'pip install "decentlearn[torch]"' in str(e)
        else:
            raise AssertionError("make_model('torch:...') worked without torch")
        print("ok")
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok"


def test_importing_decentlearn_does_not_import_torch():
    p = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {ROOT!r}); "
                        "import decentlearn, decentlearn.sim, decentlearn.cli, decentlearn.nn; "
                        "print('torch' in sys.modules)"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"


def test_info_without_torch_says_cuda_is_not_available():
    p = _run_without_torch("""
        from decentlearn.cli import main
        sys.exit(main(["info"]))
    """)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert any(line.split(":", 1)[0].strip() == "torch" and "not installed" in line
               for line in lines)
    (cuda,) = [line for line in lines if line.split(":", 1)[0].strip() == "CUDA"]
    assert cuda.split(":", 1)[1].strip().startswith("not available (torch models need PyTorch")
    assert 'pip install "decentlearn[torch]"' in cuda


def test_device_flag_without_torch_is_the_torch_message_exit_2():
    p = _run_without_torch("""
        from decentlearn.cli import main
        sys.exit(main(["run", "--model", "torch:mlp", "--device", "cuda", "--rounds", "1"]))
    """)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and 'pip install "decentlearn[torch]"' in lines[0]
