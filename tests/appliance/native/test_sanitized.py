"""The C extensions (the fast path and the DPI helpers) under AddressSanitizer and UndefinedBehaviorSanitizer.

The fast path parses bytes that anyone holding an agent certificate can send, so its memory safety is tested,
not assumed: the extensions are rebuilt with both sanitizers and the other tests of this folder
(differential, hostile bytes, threads, leaks) run against that build in a child interpreter. Any
out-of-bounds access, use after free or undefined behaviour aborts the child and fails this test.
"""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
NATIVE = ROOT / "appliance" / "native"
MODULES = ("fastpath", "dpi")  # appliance/native/<name>.c -> appliance.native.<name>
HERE = Path(__file__).resolve().parent

# The child loads the sanitized builds under the modules' real names before anything imports them.
CHILD = """
import importlib.util, sys
import appliance.native
for name in sys.argv[1].split(","):
    path = sys.argv[2] + "/" + name + sys.argv[3]
    spec = importlib.util.spec_from_file_location("appliance.native." + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["appliance.native." + name] = module
    setattr(appliance.native, name, module)
import pytest
# A test that hangs prints every thread's stack (to the captured stderr) long before the parent gives up.
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-o", "faulthandler_timeout=120",
                      *sys.argv[4:]]))
"""


def _libasan() -> str:
    out = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True).stdout.strip()
    return os.path.realpath(out)


# The child runs this folder's tests (about 640) on a sanitized build: about 2 minutes here when the host is calm, but
# the host's speed swings by up to 2.3 times (docs/figures.md), which once took it past pytest.ini's 300 s.
# The child's own deadline comes first, so that a hang shows what the child had printed.
CHILD_DEADLINE_S = 540


@pytest.mark.slow
@pytest.mark.timeout(CHILD_DEADLINE_S + 60)
def test_the_extensions_are_memory_safe_under_the_other_tests(tmp_path):
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for name in MODULES:
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer",
             "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
             f"-I{sysconfig.get_paths()['include']}", str(NATIVE / f"{name}.c"), "-o", str(tmp_path / (name + suffix))],
            check=True,
        )
    tests = sorted(str(p) for p in HERE.glob("test_*.py") if p.name != Path(__file__).name)
    env = dict(os.environ, LD_PRELOAD=_libasan(),
               # Every Python object from malloc, so that reading past a small bytes object is caught too.
               PYTHONMALLOC="malloc",
               # CPython itself is not built for the sanitizer: its allocations at exit are not leaks of ours
               # (test_fastpath.py checks leaks per packet with tracemalloc instead).
               # Reports go to files: pytest in the child captures file descriptor 2.
               ASAN_OPTIONS=f"detect_leaks=0:abort_on_error=1:verify_asan_link_order=0:log_path={tmp_path}/asan",
               UBSAN_OPTIONS=f"print_stacktrace=1:halt_on_error=1:log_path={tmp_path}/ubsan")
    try:
        child = subprocess.run([sys.executable, "-c", CHILD, ",".join(MODULES), str(tmp_path), suffix, *tests], cwd=ROOT,
                               env=env, capture_output=True, text=True, timeout=CHILD_DEADLINE_S)
    except subprocess.TimeoutExpired as late:
        printed = [out if isinstance(out, str) else (out or b"").decode(errors="replace") for out in (late.stdout, late.stderr)]
        printed = [out[-3000:] for out in printed]
        pytest.fail(f"the sanitized child ran past {CHILD_DEADLINE_S} s:\n" + "\n".join(printed))
    reports = "".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("*san.*")))
    assert not reports, reports[:8000]
    assert child.returncode == 0, child.stdout[-3000:] + child.stderr[-3000:]
    assert " passed" in child.stdout, child.stdout[-3000:]
