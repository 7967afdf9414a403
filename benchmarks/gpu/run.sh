#!/usr/bin/env bash
# mge on a bare GPU machine that cannot download: set up, build, run the GPU tests and the GPU
# benchmarks, write a table -- in under 8 minutes, never hanging.
#
#   bash benchmarks/gpu/run.sh              # from anywhere; works in the repository's root
#
# What it needs there: Python 3 with numpy, Cython, setuptools, wheel, pytest and PyTorch (CUDA
# build); CUDA's compiler (nvcc) and the NVIDIA driver.  What it brings: pycuda's sdist and its
# pure-Python dependencies (benchmarks/gpu/vendor/, README.md there), installed offline.
#
# Steps (each prints a banner, runs under `timeout`, and is recorded in steps.tsv; a failed step
# never stops the later ones, which run with whatever is there):
#   info    the machine: nvidia-smi, python, nvcc, torch, numpy, Cython versions
#   venv    a virtual environment that sees the machine's packages (numpy, Cython, torch)
#   vendor  the vendored wheels, checked against SHA256SUMS, installed with --no-index
#   pycuda  pycuda built from its sdist against the CUDA root that nvcc is in
#   mge     mge installed editable without build isolation or downloads, and its Cython
#           extensions built in place (cythonize and the C compiler in parallel)
#   smoke   pycuda's driver, NVRTC and one op on gpu0 (diagnostics only)
#   tests   python -m pytest -q -m gpu tests
#   bench   benchmarks/gpu/bench_gpu.py, one process per benchmark (matmul, convnet, dtr, mlp)
#   table   results.md: the benchmarks' table, the steps, the machine
#
# Output: everything is printed and also written to $OUT (the folder the device tool brings
# back) when it is set, else to $MGE_GPU_WORK/out: run.log, pytest.log, pytest.xml,
# bench.jsonl, results.md.  results.md is also copied to benchmarks/gpu/results.md when $OUT is
# not set.
#
# Time: the whole run keeps within MGE_GPU_BUDGET_S seconds (default 450).  Each step's timeout
# is its own cap, cut so that the steps after it keep their reserve: the tests get what the
# benchmarks do not need.  Environment:
#   MGE_GPU_BUDGET_S   total seconds (default 450)
#   MGE_GPU_STEPS      comma-separated steps to run (default: all of them, in order)
#   MGE_GPU_WORK       scratch folder (default /tmp/mge-gpu): the venv, pycuda's build
#   MGE_GPU_BENCHES    benchmarks, in order (default matmul,convnet,convnet_trace,dtr,mlp)
#   MGE_GPU_BENCH_ARGS extra arguments for bench_gpu.py (e.g. "--rounds 5")
#   MGE_GPU_PYTEST_ARGS extra arguments for pytest (e.g. "-x -k conv")
#   MGE_GPU_LIBCUDA    the driver library pycuda links (default: ldconfig's, the NVIDIA
#                      folders', else the toolkit's stub)
#   PYTHON             the Python to start from (default python3)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
ROOT=$PWD
START=$(date +%s)
BUDGET=${MGE_GPU_BUDGET_S:-450}
STEPS=",${MGE_GPU_STEPS:-info,venv,vendor,pycuda,mge,smoke,tests,bench,table},"
WORK=${MGE_GPU_WORK:-/tmp/mge-gpu}
BENCHES=${MGE_GPU_BENCHES:-matmul,convnet,convnet_trace,dtr,mlp}
PY=${PYTHON:-python3}
VENDOR=$ROOT/benchmarks/gpu/vendor
JOBS=$(nproc 2>/dev/null || echo 4)
if [ -n "${OUT:-}" ]; then RES=$OUT; else RES=$WORK/out; fi
mkdir -p "$WORK" "$RES" || exit 1
LOG=$RES/run.log
: >"$LOG"
: >"$RES/steps.tsv"
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_NO_CACHE_DIR=1
# the CUDA device is off until it has passed on a GPU (driver.DEVICE_IMPLEMENTED): this script
# is where it first runs there
export MGE_CUDA_UNVERIFIED=1

# Seconds each later step keeps in reserve (the minimum it is allowed), and the caps.
TABLE_RESERVE=15
declare -A CAP=([info]=40 [venv]=40 [vendor]=40 [pycuda]=200 [mge]=150 [smoke]=60
                [tests]=240 [matmul]=60 [convnet]=90 [dtr]=90 [mlp]=50)
declare -A MIN=([matmul]=30 [convnet]=45 [convnet_trace]=45 [dtr]=45 [mlp]=25)

elapsed() { echo $(( $(date +%s) - START )); }
remaining() { echo $(( BUDGET - $(elapsed) )); }
want() { [[ $STEPS == *",$1,"* ]]; }

# The benchmarks' reserve: the minimum of each benchmark still to run, plus the table's.
bench_reserve() {
    local total=$TABLE_RESERVE b
    if want bench; then
        for b in ${BENCHES//,/ }; do total=$(( total + ${MIN[$b]:-30} )); done
    fi
    echo "$total"
}

# limit CAP RESERVE: the timeout for a step that must leave RESERVE seconds to the steps after it.
limit() {
    local cap=$1 reserve=$2 left
    left=$(( $(remaining) - reserve ))
    (( left < cap )) && cap=$left
    echo "$cap"
}

banner() { printf '\n===== %s  [t=%ss, %ss left]\n' "$*" "$(elapsed)" "$(remaining)"; }

# run NAME SECONDS CMD...: run a step under timeout, record its status and duration.
run() {
    local name=$1 secs=$2 t0 rc
    shift 2
    banner "$name (timeout ${secs}s)"
    if (( secs < 5 )); then
        echo "run.sh: no time left for $name"
        printf '%s\t%s\t%s\n' "$name" "skipped: no time left" 0 >>"$RES/steps.tsv"
        return 124
    fi
    t0=$(date +%s)
    # a step is a function of this script: run it in a child bash (the functions and variables
    # are exported), whose whole process group timeout ends
    timeout --kill-after=10 "$secs" bash -c '"$@"' step "$@"
    rc=$?
    local status=ok
    if (( rc == 124 || rc == 137 )); then status="TIMED OUT after ${secs}s"
    elif (( rc != 0 )); then status="FAILED (exit $rc)"; fi
    printf '%s\t%s\t%s\n' "$name" "$status" "$(( $(date +%s) - t0 ))" >>"$RES/steps.tsv"
    echo "run.sh: $name: $status in $(( $(date +%s) - t0 ))s"
    return $rc
}

# -- info -----------------------------------------------------------------------------------------
machine_info() {
    {
        echo "machine: $(uname -srm), $(nproc) cores, $(free -g 2>/dev/null | awk '/Mem:/{print $2 " GiB memory"}')"
        echo "date: $(date -u '+%F %T UTC'); mge commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
        if command -v nvidia-smi >/dev/null; then
            timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
                --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
        else
            echo "gpu: nvidia-smi not found"
        fi
        echo "python: $($PY -c 'import sys; print(sys.version.split()[0], sys.executable)' 2>&1)"
        echo "nvcc: $(find_nvcc) $( (timeout 20 "$(find_nvcc)" --version 2>/dev/null || true) | tail -1)"
        timeout 60 "$PY" - <<'EOF' 2>&1
import importlib
for name in ("numpy", "Cython", "setuptools", "pytest"):
    try:
        print(f"{name}: {importlib.import_module(name).__version__}")
    except Exception as e:
        print(f"{name}: missing ({type(e).__name__}: {e})")
try:
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU seen"
    print(f"torch: {torch.__version__} (CUDA {torch.version.cuda}, cuDNN "
          f"{torch.backends.cudnn.version()}), {gpu}")
except Exception as e:
    print(f"torch: missing ({type(e).__name__}: {e})")
EOF
    } | tee "$RES/machine.txt"
    echo
    timeout 20 nvidia-smi 2>&1 || true
    df -h "$WORK" 2>/dev/null | tail -1
}

# nvcc: on PATH, else the usual toolkit folders.
find_nvcc() {
    local c
    for c in "$(command -v nvcc 2>/dev/null)" /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc \
             /opt/cuda/bin/nvcc; do
        [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
    done
    echo "nvcc-not-found"
    return 1
}

# -- venv -----------------------------------------------------------------------------------------
VENV=$WORK/venv
VPY=$PY
make_venv() {
    # --without-pip: no ensurepip (absent on some distributions' Pythons); the outer pip is used
    # through the path below.  A Python that is itself a venv (the machine's torch Python) gives
    # its new venv the *base* interpreter's site-packages, not its own: a .pth file adds the
    # outer environment's site-packages, after the venv's own.
    if [ ! -x "$VENV/bin/python" ]; then
        "$PY" -m venv --system-site-packages --without-pip "$VENV" || return 1
    fi
    local site outer
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return 1
    outer=$("$PY" -c 'import site, sys; print("\n".join(p for p in site.getsitepackages() if sys.prefix != sys.base_prefix))')
    if [ -n "$outer" ]; then
        echo "$outer" >"$site/_mge_outer_env.pth"
        echo "run.sh: the venv also sees $outer"
    fi
    "$VENV/bin/python" -c 'import numpy, Cython, setuptools, pip; print("venv ok: numpy", numpy.__version__, "Cython", Cython.__version__, "pip", pip.__version__)'
}

# -- vendor ---------------------------------------------------------------------------------------
install_vendor() {
    (cd "$VENDOR" && sha256sum -c SHA256SUMS) || { echo "run.sh: vendored files do not match SHA256SUMS"; return 1; }
    "$VPY" -m pip install --no-index --find-links "$VENDOR" wheel pytools platformdirs mako siphash24 && return 0
    # a Python for which no siphash24 wheel is here: pytools without it (only pytools'
    # persistent_dict, used by pycuda.compiler, needs it; mge compiles with NVRTC)
    echo "run.sh: retrying without siphash24 (pytools --no-deps)"
    "$VPY" -m pip install --no-index --find-links "$VENDOR" wheel platformdirs mako &&
        "$VPY" -m pip install --no-index --no-deps --find-links "$VENDOR" pytools
}

# -- pycuda ---------------------------------------------------------------------------------------
# first FILE-GLOB DIR...: the first file matching the glob in these folders.
first() {
    local pat=$1 d f
    shift
    for d in "$@"; do
        for f in "$d"/$pat; do [ -e "$f" ] && { echo "$f"; return 0; }; done
    done
    return 1
}

# cuda_root NVCC: the toolkit's root, as nvcc itself reports it (nvcc may be a wrapper script
# elsewhere, e.g. /usr/local/bin/nvcc exec-ing /usr/local/cuda-13.0/bin/nvcc), with include/cuda.h.
cuda_root() {
    local top r
    top=$("$1" --dryrun -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)
    for r in "$top" "$(dirname "$(dirname "$(readlink -f "$1")")")" /usr/local/cuda; do
        [ -n "$r" ] && [ -f "$r/include/cuda.h" ] && { readlink -f "$r"; return 0; }
    done
    return 1
}

build_pycuda() {
    if "$VPY" -c 'import pycuda.driver' 2>/dev/null; then
        echo "run.sh: pycuda is already installed here: $("$VPY" -c 'import pycuda; print(pycuda.VERSION_TEXT, pycuda.__file__)')"
        return 0
    fi
    local nvcc root libdirs drv stub rt curand src
    nvcc=$(find_nvcc) || { echo "run.sh: nvcc not found: pycuda needs the CUDA toolkit"; return 1; }
    root=$(cuda_root "$nvcc") || { echo "run.sh: no CUDA root (include/cuda.h) found from $nvcc"; return 1; }
    echo "run.sh: CUDA root $root (from $nvcc)"
    libdirs=("$root/lib64" "$root/lib" "$root/targets/x86_64-linux/lib")
    # The driver library to link: the machine's own libcuda (ldconfig, the NVIDIA mounts), else
    # the toolkit's stub.  -lcuda wants an unversioned libcuda.so: a link in $WORK/lib.
    drv=${MGE_GPU_LIBCUDA:-}
    [ -z "$drv" ] && drv=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so/{print $NF; exit}')
    [ -z "$drv" ] && drv=$(first 'libcuda.so*' /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
                            /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib/wsl/lib)
    stub=$(first 'libcuda.so' "${libdirs[@]/%//stubs}")
    [ -z "$drv" ] && drv=$stub
    [ -z "$drv" ] && { echo "run.sh: no libcuda.so found (driver or toolkit stub)"; return 1; }
    echo "run.sh: linking the driver library $drv"
    mkdir -p "$WORK/lib" && ln -sf "$drv" "$WORK/lib/libcuda.so"
    [ "$drv" != "$stub" ] && dirname "$(readlink -f "$drv")" >"$WORK/driver_dir"
    rt=$(first 'libcudart.so*' "${libdirs[@]}")
    curand=$(first 'libcurand.so*' "${libdirs[@]}")
    local -a conf=(--cuda-root="$root" --cudadrv-lib-dir="$WORK/lib"
                   --cudart-lib-dir="$(dirname "${rt:-$root/lib64/x}")")
    if [ -n "$curand" ]; then
        conf+=(--cuda-enable-curand --curand-lib-dir="$(dirname "$curand")")
    else
        echo "run.sh: no libcurand in the toolkit: pycuda without CURAND (mge does not use it)"
        conf+=(--no-cuda-enable-curand)
    fi
    src=$WORK/pycuda-src
    rm -rf "$src" && mkdir -p "$src" &&
        tar xzf "$VENDOR"/pycuda-*.tar.gz -C "$src" --strip-components=1 || return 1
    (
        cd "$src" || exit 1
        # configure.py writes siteconf.py (without it setup.py waits 10 s for a Ctrl-C);
        # build_ext's parallel option compiles the Boost.Python subset on every core
        "$VPY" configure.py "${conf[@]}" || exit 1
        printf '\n[build_ext]\nparallel = %s\n' "$JOBS" >>setup.cfg
        cat siteconf.py
        export PATH="$(dirname "$nvcc"):$PATH"
        "$VPY" -m pip install --no-build-isolation --no-index --find-links "$VENDOR" .
    ) || return 1
    driver_dir_path
    check_pycuda
}

# pycuda's extension loads libcuda.so.1 at import: where the loader does not know the driver's
# folder (no ldconfig entry), the caller exports LD_LIBRARY_PATH with it (driver_dir_path).
check_pycuda() {
    "$VPY" -c 'import pycuda, pycuda.driver as d; d.init(); print("pycuda", pycuda.VERSION_TEXT, "CUDA", d.get_version(), "driver", d.get_driver_version(), "GPUs", d.Device.count(), d.Device(0).name())'
}

# driver_dir_path: LD_LIBRARY_PATH with the driver library's folder, when pycuda needs it.
driver_dir_path() {
    "$VPY" -c 'import pycuda.driver' 2>/dev/null && return 0
    [ -s "$WORK/driver_dir" ] || return 0
    export LD_LIBRARY_PATH="$(cat "$WORK/driver_dir")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "run.sh: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
}

# -- mge ------------------------------------------------------------------------------------------
build_mge() {
    # The editable install brings the entry points (the transformation plugins) and the finder;
    # MGE_NO_CYTHON=1 makes it quick (setup.py then lists no extensions), and build_ext --inplace
    # builds them beside the sources, cythonize on every core (MGE_BUILD_JOBS), the C compiler
    # too (-j).
    MGE_NO_CYTHON=1 "$VPY" -m pip install --no-build-isolation --no-deps --no-index -e "$ROOT" || return 1
    (cd "$ROOT" && MGE_BUILD_JOBS="$JOBS" "$VPY" setup.py build_ext --inplace -j "$JOBS") || return 1
    MGE_REQUIRE_COMPILED=1 "$VPY" -c 'import mge, mge.core; print("mge", mge.__version__, mge.core.compiled_modules())'
}

smoke() {
    "$VPY" - <<'EOF'
import traceback
import mge
print("mge.is_cuda_available():", mge.is_cuda_available())
print("mge.device.get_device_count('gpu'):", mge.device.get_device_count("gpu"))
try:
    from mge._core.device.cuda import nvrtc
    print("nvrtc:", nvrtc.why_unavailable() or f"ok, version {nvrtc.nvrtc_version()}, archs "
          f"{nvrtc.supported_archs()[-3:]}", "| ptxas:", nvrtc.find_ptxas())
except Exception:
    traceback.print_exc()
try:
    x = mge.tensor([1.0, 2.0, 3.0], device="gpu0")
    print("gpu0:", x.device, (x * 2 + 1).numpy(), "allocated", mge.device.get_allocated_memory("gpu0"))
except Exception:
    traceback.print_exc()
    raise SystemExit(1)
EOF
}

# NVRTC: mge looks in the nvidia-cuda-nvrtc wheel, the linker's path and /usr/local/cuda; point
# it at the toolkit's library when none of these has one.
find_nvrtc() {
    "$VPY" -c 'import sys; from mge._core.device.cuda import nvrtc; sys.exit(1 if nvrtc.why_unavailable() else 0)' 2>/dev/null && return 0
    local nvcc root lib
    nvcc=$(find_nvcc) && root=$(cuda_root "$nvcc")
    lib=$(first 'libnvrtc.so*' "$root/lib64" "$root/targets/x86_64-linux/lib" \
          $("$VPY" -c 'import site; print(" ".join(f"{p}/nvidia/cu13/lib {p}/nvidia/cuda_nvrtc/lib" for p in site.getsitepackages()))' 2>/dev/null))
    if [ -n "$lib" ]; then
        export MGE_NVRTC_LIBRARY=$lib
        echo "run.sh: MGE_NVRTC_LIBRARY=$lib"
    fi
    local ptx
    ptx=$(first ptxas "$(dirname "${nvcc:-/x/x}")")
    [ -n "$ptx" ] && export MGE_PTXAS=$ptx
}

# -- tests and benchmarks -------------------------------------------------------------------------
run_tests() {
    local -a extra=()
    "$VPY" -c 'import pytest_timeout' 2>/dev/null && extra+=(--timeout=120)
    # shellcheck disable=SC2206
    extra+=(${MGE_GPU_PYTEST_ARGS:-})
    "$VPY" -m pytest -q -m gpu tests -rs -p no:cacheprovider --durations=15 \
        --junitxml="$RES/pytest.xml" "${extra[@]}" 2>&1 | tee "$RES/pytest.log"
}

run_benches() {
    local b secs later rc
    local -a list=(${BENCHES//,/ })
    local i
    for i in "${!list[@]}"; do
        b=${list[$i]}
        later=$TABLE_RESERVE
        for j in "${list[@]:$((i + 1))}"; do later=$(( later + ${MIN[$j]:-30} )); done
        secs=$(limit "${CAP[$b]:-60}" "$later")
        # shellcheck disable=SC2086
        run "bench $b" "$secs" "$VPY" "$ROOT/benchmarks/gpu/bench_gpu.py" --bench "$b" \
            --json "$RES/bench.jsonl" ${MGE_GPU_BENCH_ARGS:-}
        rc=$?
        if (( rc != 0 )); then  # the table says what happened to it
            printf '{"bench": "%s", "error": "bench_gpu.py exited %s after at most %ss (124: timed out); see run.log"}\n' \
                "$b" "$rc" "$secs" >>"$RES/bench.jsonl"
        fi
    done
}

write_table() {
    local md=$RES/results.md
    {
        echo '```'
        cat "$RES/machine.txt" 2>/dev/null
        echo '```'
    } >"$WORK/machine.md"
    "$VPY" "$ROOT/benchmarks/gpu/bench_gpu.py" --table "$RES/bench.jsonl" \
        --machine "$WORK/machine.md" --out "$md" >/dev/null || {
        echo "# mge on the GPU: the table could not be written (see run.log)" >"$md"; }
    {
        echo
        echo "## Steps of run.sh (budget ${BUDGET}s, total $(elapsed)s)"
        echo
        echo "| step | status | seconds |"
        echo "| --- | --- | --- |"
        awk -F'\t' '{printf "| %s | %s | %s |\n", $1, $2, $3}' "$RES/steps.tsv"
        if [ -f "$RES/pytest.log" ]; then
            echo
            echo "GPU tests: $(grep -E '(passed|failed|skipped|error|no tests ran)' "$RES/pytest.log" | tail -1)"
        fi
    } >>"$md"
    [ -z "${OUT:-}" ] && cp "$md" "$ROOT/benchmarks/gpu/results.md"
    cat "$md"
}

# -- the run --------------------------------------------------------------------------------------
export ROOT START BUDGET WORK PY VPY VENV VENDOR JOBS RES
export -f cuda_root find_nvcc make_venv install_vendor first build_pycuda check_pycuda driver_dir_path \
    build_mge smoke run_tests
want info && { banner info; machine_info; printf 'info\tok\t%s\n' "$(elapsed)" >>"$RES/steps.tsv"; }
if want venv; then
    run venv "$(limit "${CAP[venv]}" $(( $(bench_reserve) + 60 )))" make_venv && VPY=$VENV/bin/python
    if [ "$VPY" = "$PY" ]; then
        echo "run.sh: no venv; installing into $PY's environment"
    fi
elif [ -x "$VENV/bin/python" ]; then
    VPY=$VENV/bin/python
fi
want vendor && run vendor "$(limit "${CAP[vendor]}" $(( $(bench_reserve) + 60 )))" install_vendor
want pycuda && run pycuda "$(limit "${CAP[pycuda]}" $(( $(bench_reserve) + 90 )))" build_pycuda
driver_dir_path
if want mge; then
    if ! run mge "$(limit "${CAP[mge]}" $(( $(bench_reserve) + 60 )))" build_mge; then
        echo "run.sh: the compiled modules are missing: the tests and benchmarks run mge's pure-Python form"
        export MGE_PUREPYTHON=1
    fi
fi
find_nvrtc
want smoke && run smoke "$(limit "${CAP[smoke]}" $(( $(bench_reserve) + 60 )))" smoke
want tests && run tests "$(limit "${CAP[tests]}" "$(bench_reserve)")" run_tests
want bench && run_benches
if want table; then banner table; write_table; fi
banner "done in $(elapsed)s"
exit 0
