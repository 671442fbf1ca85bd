#!/usr/bin/env bash
# Builds scatterx with AddressSanitizer + UndefinedBehaviorSanitizer into a virtualenv of its own
# and runs the whole test suite under the sanitizers (see docs/hardening.md).
#
# Usage, from the repository root:
#   scripts/sanitize.sh                           # build if needed, run the whole suite
#   scripts/sanitize.sh tests/test_fuzz.py -x     # arguments go to pytest
#   scripts/sanitize.sh --run python scripts/fuzz_long.py --calls 1000000   # any command
#
# Environment:
#   SCATTERX_SANITIZE_VENV=DIR   the virtualenv (default build/sanitize-venv); the developer's own
#                                environment is never touched
#   SCATTERX_SANITIZE_REINSTALL=0  skip the reinstall that picks up changes of src/ and cpp/
#                                (incremental: seconds when nothing changed)
#   CC, CXX                      the compiler (default gcc/g++); its sanitizer runtimes are preloaded
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

venv=${SCATTERX_SANITIZE_VENV:-build/sanitize-venv}
case $venv in /*) ;; *) venv=$root/$venv ;; esac
export CC=${CC:-gcc} CXX=${CXX:-g++}

libasan=$("$CC" -print-file-name=libasan.so)
libubsan=$("$CC" -print-file-name=libubsan.so)
for lib in "$libasan" "$libubsan"; do
    [ -e "$lib" ] || { echo "sanitize.sh: $CC has no sanitizer runtime $(basename "$lib")" >&2; exit 2; }
done

py=$venv/bin/python
rebuild=${SCATTERX_SANITIZE_REINSTALL:-1}
if [ ! -x "$py" ]; then
    python3 -m venv "$venv"
    "$py" -m pip install -q "scikit-build-core>=0.10" "nanobind>=2.4" "numpy>=2.0" cmake ninja psutil
    # The test extra of pyproject.toml, without building scatterx a second time.
    mapfile -t deps < <("$py" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"]))')
    "$py" -m pip install -q "${deps[@]}"
    rebuild=1
fi
if [ "$rebuild" = 1 ]; then
    # No build isolation: the extension is compiled against the venv's own numpy.
    "$py" -m pip install -q --no-build-isolation --no-deps --force-reinstall \
        -C cmake.define.SCATTERX_SANITIZE=address,undefined \
        -C cmake.build-type=RelWithDebInfo \
        -C build-dir=build/asan .
fi

# The ASan runtime must come first in the process: python itself is not instrumented.
export LD_PRELOAD="$libasan $libubsan${LD_PRELOAD:+ $LD_PRELOAD}"
# CPython and NumPy keep memory until exit on purpose; leak reports would only list those
# (scripts/leak_check.py measures leaks instead).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# Slow instrumented calls: the fuzz harness drops its deadline under this profile.
export SCATTERX_FUZZ_PROFILE=${SCATTERX_FUZZ_PROFILE:-sanitize}

# src/ is not on sys.path from the repository root, so the sanitized install is what imports.
"$py" -c 'import scatterx._core as c; print("sanitized core:", c.__file__)'
if [ "${1:-}" = --run ]; then
    shift
    [ "${1:-}" = python ] && { shift; set -- "$py" "$@"; }
    exec "$@"
fi
# Third-party code that ASan stops at, left out by exact test id (docs/hardening.md):
# onnxruntime reads a numpy "S1" array (no NUL terminator) with strlen, one byte past the buffer.
known=(--deselect "tests/test_peers.py::test_onnxruntime_refuses_non_utf8_bytes")
# Sanitizer reports go to fd 2, which pytest would capture and lose when the process halts.
exec "$py" -m pytest -q -p no:cacheprovider --capture=sys "${known[@]}" "$@"
