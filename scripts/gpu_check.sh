#!/usr/bin/env bash
# Builds flywheel's CUDA configuration on a lent GPU machine and runs the gpu-labelled tests and
# rollout_bench there, in one command:
#
#   scripts/gpu_check.sh [OUTDIR]            # OUTDIR: default $OUT, else build-gpu/check
#   scripts/gpu_check.sh --dry-run [OUTDIR]  # unpack and check the prefix, print the commands
#   scripts/gpu_check.sh --configure-only    # ... and run the CMake configure step, then stop
#
# The machine: a PyTorch 2.x (CUDA) pip install, nvcc, CMake, Ninja and the pip package
# nvidia-nccl-cu13; no apt, no network. flywheel's other dependencies come as Debian 12 .debs in
# `.gpu-deps/` (made here by scripts/gpu_deps.sh; carry that folder, ~25 MiB), unpacked with
# `dpkg -x` into a prefix under /tmp (not into /). The stages, each timed:
#   1. unpack the .debs; relocate the .pc files; make the mpicxx/mpirun links that Debian's
#      alternatives would; point -dev symlinks whose library was left out (libssl.so, libz.so,
#      libpcre2-8.so) at the image's; list shared libraries no file can find.
#   2. configure build-gpu (CUDA, NCCL from the pip package, benchmarks) against torch's CMake
#      prefix and the unpacked one; print where each dependency was found.
#   3. build engine_gpu_test, gpu_parity_test and rollout_bench (-j FLYWHEEL_JOBS, default 16).
#   4. ctest -L gpu (rollout.gpu.*, trainer.gpu_parity under mpirun).
#   5. rollout_bench --device cuda, float32 and bfloat16.
#   6. build the flywheel binary and run `flywheel version`.
# A failing test does not stop the bench; every stage's exit status goes into the summary.
# Everything stays within FLYWHEEL_GPU_DEADLINE_S seconds (default 560: one 10-minute command).
# Outputs in OUTDIR, plain files: nvidia-smi.txt, versions.txt, prefix_check.txt, configure.log,
# build.log, ctest.log, rollout_bench_float32.txt, rollout_bench_bfloat16.txt, build_flywheel.log,
# flywheel_version.txt, summary.txt.
#
# Environment overrides: FLYWHEEL_GPU_DEPS (.gpu-deps), FLYWHEEL_GPU_PREFIX
# (/tmp/flywheel-gpu-prefix), FLYWHEEL_GPU_BUILD_DIR (build-gpu), FLYWHEEL_TORCH_PREFIX (torch's
# cmake_prefix_path, or any folder holding TorchConfig.cmake), FLYWHEEL_NCCL_HOME (the pip
# package's nvidia/nccl), CUDAToolkit_ROOT, FLYWHEEL_JOBS, FLYWHEEL_BUILD_TYPE (RelWithDebInfo),
# FLYWHEEL_GPU_DEADLINE_S, FLYWHEEL_GPU_CMAKE_ARGS (extra
# configure arguments, split on spaces).
#
# Status: this has NOT run on a GPU yet. Its --dry-run and --configure-only modes were run on the
# Debian 12 CPU machine against Debian's LibTorch 1.13, with CMake's system paths switched off so
# that only the unpacked prefix could be found (see docs/development.md, "GPU check").
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

mode=run
out=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) mode=dry ;;
    --configure-only) mode=configure ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "gpu_check: unknown option $arg (see --help)" >&2
      exit 2
      ;;
    *) out=$arg ;;
  esac
done
out=${out:-${OUT:-$root/build-gpu/check}}
deps=${FLYWHEEL_GPU_DEPS:-$root/.gpu-deps}
prefix=${FLYWHEEL_GPU_PREFIX:-/tmp/flywheel-gpu-prefix}
build=${FLYWHEEL_GPU_BUILD_DIR:-$root/build-gpu}
jobs=${FLYWHEEL_JOBS:-16}
build_type=${FLYWHEEL_BUILD_TYPE:-RelWithDebInfo}  # as the CPU build whose figures it meets
deadline=${FLYWHEEL_GPU_DEADLINE_S:-560}
python=${PYTHON:-python3}
arch=x86_64-linux-gnu
mkdir -p "$out"
out=$(cd "$out" && pwd)

t0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
left() { awk -v a="$t0" -v b="$(date +%s.%N)" -v d="$deadline" 'BEGIN { printf "%d", d - (b - a) }'; }
declare -a summary=()
stage_begin() {
  stage_name=$1
  stage_t=$(date +%s.%N)
  echo
  echo "=== gpu_check: $stage_name ($(left) s left)"
}
stage_end() {  # stage_end RC [NOTE]
  local s
  s=$(elapsed "$stage_t")
  echo "=== gpu_check: $stage_name: rc $1, ${s} s${2:+ ($2)}"
  summary+=("$(printf '%-28s rc %-4s %7s s  %s' "$stage_name" "$1" "$s" "${2:-}")")
}
# Runs "$@" with the time that is left (at least 10 s), output into file $1 and to the console's
# last lines; returns the command's status.
run_logged() {
  local log=$1 rc=0 limit
  shift
  limit=$(left)
  ((limit < 10)) && limit=10
  timeout "$limit" "$@" >"$log" 2>&1 || rc=$?
  tail -n 30 "$log"
  ((rc == 124)) && echo "gpu_check: timed out after $limit s: $*"
  return "$rc"
}

list() { if (($# > 0)); then printf '%s\n' "$@"; else echo "(none)"; fi; }

# --- resolve paths ---------------------------------------------------------------------------
unresolved=()
if [[ -z "${FLYWHEEL_TORCH_PREFIX:-}" ]]; then
  FLYWHEEL_TORCH_PREFIX=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' \
    2>/dev/null || true)
fi
torch_prefix=${FLYWHEEL_TORCH_PREFIX:-}
[[ -n "$torch_prefix" ]] || unresolved+=("torch's CMake prefix (python3 -c 'import torch')")

if [[ -z "${FLYWHEEL_NCCL_HOME:-}" ]]; then
  # The pip package nvidia-nccl-cu13: site-packages/nvidia/nccl/{include/nccl.h,lib/libnccl.so.2}.
  FLYWHEEL_NCCL_HOME=$("$python" - <<'EOF' 2>/dev/null || true
import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
for d in dirs:
    for h in sorted(glob.glob(os.path.join(d, "nvidia", "**", "include", "nccl.h"), recursive=True)):
        print(os.path.dirname(os.path.dirname(h)))
        raise SystemExit
EOF
  )
fi
nccl_home=${FLYWHEEL_NCCL_HOME:-}
nccl_lib=""
for f in "$nccl_home/lib/libnccl.so" "$nccl_home/lib/libnccl.so.2" "$nccl_home/lib64/libnccl.so"; do
  if [[ -n "$nccl_home" && -e "$f" ]]; then
    nccl_lib=$f
    break
  fi
done
[[ -n "$nccl_lib" && -f "$nccl_home/include/nccl.h" ]] ||
  unresolved+=("NCCL (nccl.h + libnccl.so[.2] under FLYWHEEL_NCCL_HOME='$nccl_home')")

cuda_root=${CUDAToolkit_ROOT:-${CUDA_HOME:-}}
if [[ -z "$cuda_root" ]] && command -v nvcc >/dev/null 2>&1; then
  cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
fi
cuda_root=${cuda_root:-/usr/local/cuda}
[[ -x "$cuda_root/bin/nvcc" ]] || unresolved+=("nvcc under CUDAToolkit_ROOT='$cuda_root'")

echo "gpu_check: mode $mode; outputs in $out"
echo "  repository  $root"
echo "  .debs       $deps ($(find "$deps" -maxdepth 1 -name '*.deb' 2>/dev/null | wc -l) files)"
echo "  prefix      $prefix"
echo "  build dir   $build (-j $jobs)"
echo "  torch       ${torch_prefix:-UNRESOLVED}"
echo "  NCCL        ${nccl_home:-UNRESOLVED} (library ${nccl_lib:-UNRESOLVED})"
echo "  CUDA        $cuda_root"
if ((${#unresolved[@]} > 0)); then
  printf 'gpu_check: unresolved: %s\n' "${unresolved[@]}"
  [[ "$mode" == dry ]] || exit 1
fi

# --- the machine -----------------------------------------------------------------------------
if [[ "$mode" == run ]]; then
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory,clocks.max.sm \
    --format=csv >>"$out/nvidia-smi.txt" 2>&1 || true
  head -n 15 "$out/nvidia-smi.txt"
fi
{
  echo "date: $(date -u '+%F %T') UTC"
  echo "host: $(uname -a)"
  grep -m1 PRETTY_NAME /etc/os-release 2>/dev/null || true
  echo "cpus: $(nproc)"
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' \
    2>&1 | tail -n 1 || true
  "$cuda_root/bin/nvcc" --version 2>&1 | tail -n 2 || true
  cmake --version 2>&1 | head -n 1 || true
  c++ --version 2>&1 | head -n 1 || true
  [[ -f "$nccl_home/include/nccl.h" ]] &&
    grep -E '^#define NCCL_(MAJOR|MINOR|PATCH) ' "$nccl_home/include/nccl.h" | tr '\n' ' ' && echo
  echo "--- .gpu-deps/MANIFEST"
  cat "$deps/MANIFEST" 2>/dev/null || echo "(none)"
} >"$out/versions.txt"

# --- 1. unpack -------------------------------------------------------------------------------
stage_begin "unpack .gpu-deps"
debs=("$deps"/*.deb)
if [[ ! -e "${debs[0]}" ]]; then
  echo "gpu_check: no .deb files in $deps (run scripts/gpu_deps.sh on the development machine" \
    "and carry .gpu-deps)" >&2
  exit 1
fi
rm -rf "$prefix"
mkdir -p "$prefix"
for deb in "${debs[@]}"; do dpkg -x "$deb" "$prefix"; done
lib=$prefix/usr/lib/$arch
# Debian's update-alternatives would make these.
for t in mpicxx mpic++ mpicc mpirun mpiexec; do ln -sfn "$t.openmpi" "$prefix/usr/bin/$t"; done
# pkg-config files name /usr: point them at the prefix.
find "$prefix" -name '*.pc' -exec sed -i -E "s#^([A-Za-z_]+)=/usr(/|\$)#\\1=$prefix/usr\\2#" {} +
# -dev symlinks to libraries gpu_deps.sh leaves to the image (libssl.so -> libssl.so.3, libz.so,
# libpcre2-8.so): point them at the image's library of the same soname.
relinked=()
while IFS= read -r link; do
  target=$(basename "$(readlink "$link")")
  soname=$(sed -E 's/^(.*\.so\.[0-9]+).*/\1/' <<<"$target")
  for d in /usr/lib/$arch /lib/$arch /usr/lib64 /lib64; do
    if [[ -e "$d/$soname" ]]; then
      ln -sfn "$d/$soname" "$link"
      relinked+=("${link#"$prefix"/} -> $d/$soname")
      break
    fi
  done
done < <(find "$prefix" -xtype l -name 'lib*.so*' -path '*/lib/*')
{
  echo "unpacked ${#debs[@]} .debs into $prefix ($(du -sm "$prefix" | cut -f1) MiB)"
  echo "--- -dev symlinks pointed at the image's libraries:"
  list "${relinked[@]}"
  echo "--- symlinks still dangling:"
  dangling=$(find "$prefix" -xtype l -name 'lib*.so*' -path '*/lib/*' | sed "s#^$prefix/##")
  echo "${dangling:-(none)}"
} >"$out/prefix_check.txt"

# Every file the check may need must be there (Debian's protobuf has no protobuf-config.cmake:
# CMake's FindProtobuf module finds the library, headers and protoc).
required=(
  "$lib/cmake/grpc/gRPCConfig.cmake" "$prefix/usr/bin/grpc_cpp_plugin"
  "$lib/cmake/absl/abslConfig.cmake" "$lib/cmake/yaml-cpp/yaml-cpp-config.cmake"
  "$lib/cmake/spdlog/spdlogConfig.cmake" "$lib/cmake/fmt/fmt-config.cmake"
  "$prefix/usr/share/cmake/CLI11/CLI11Config.cmake" "$lib/cmake/GTest/GTestConfig.cmake"
  "$lib/libprotobuf.so" "$prefix/usr/include/google/protobuf/message.h" "$prefix/usr/bin/protoc"
  "$prefix/usr/bin/mpicxx" "$prefix/usr/bin/mpiexec" "$lib/openmpi/include/mpi.h"
  "$lib/pkgconfig/libpcre2-8.pc" "$lib/pkgconfig/libutf8proc.pc" "$prefix/usr/bin/pkg-config"
  "$lib/libssl.so" "$lib/libz.so" "$lib/libpcre2-8.so" "$lib/libzstd.so" "$lib/pkgconfig/libzstd.pc"
)
missing=()
for f in "${required[@]}"; do [[ -e "$f" ]] || missing+=("${f#"$prefix"/}"); done
# Shared libraries that the carried libraries and tools need and nothing provides (neither the
# prefix nor the image's ldconfig cache). OpenMPI's transport plugins (openmpi3/mca_*) and their
# helpers (libmca_common_ucx/ofi/verbs) are left out on purpose: UCX, libfabric and verbs are not
# carried (see gpu_deps.sh).
unfound=()
if command -v readelf >/dev/null 2>&1; then
  declare -A have=()
  while read -r so; do have[$so]=1; done < <(ldconfig -p 2>/dev/null | awk 'NR > 1 { print $1 }')
  for d in "$lib" "$prefix/lib/$arch" "$lib/openmpi/lib" "$lib/pmix2/lib"; do
    for f in "$d"/*.so*; do [[ -e "$f" ]] && have[$(basename "$f")]=1; done
  done
  for f in "$lib"/*.so.* "$lib/openmpi/lib"/*.so.* "$prefix/lib/$arch"/*.so.* \
    "$prefix"/usr/bin/{protoc,grpc_cpp_plugin,opal_wrapper,orterun,orted,pkgconf}; do
    [[ -f "$f" && ! -L "$f" && "$f" != */libmca_common_* ]] || continue
    while read -r so; do
      [[ -n "${have[$so]:-}" ]] || unfound+=("$so (${f#"$prefix"/})")
    done < <(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  done
else
  unfound+=("(readelf not found: not checked)")
fi
{
  echo "--- required files missing:"
  list "${missing[@]}"
  echo "--- shared libraries needed and not found:"
  list "${unfound[@]}"
} >>"$out/prefix_check.txt"
cat "$out/prefix_check.txt"
if ((${#missing[@]} > 0)); then
  stage_end 1 "missing: ${missing[*]}"
  exit 1
fi
stage_end 0 "${#relinked[@]} symlinks relinked, ${#unfound[@]} libraries not found"

# --- the environment -------------------------------------------------------------------------
export PATH="$prefix/usr/bin:$cuda_root/bin:$PATH"
nccl_lib_dir=$(dirname "$nccl_lib")
export LD_LIBRARY_PATH="$lib:$prefix/lib/$arch:$lib/openmpi/lib:$nccl_lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$lib/pkgconfig:$prefix/usr/share/pkgconfig"
export PKG_CONFIG_LIBDIR="$PKG_CONFIG_PATH"  # only the prefix's .pc files, not the image's
# The relocated OpenMPI (and its PMIx); one host: no ssh launcher, shared memory between ranks,
# the network transports that are not carried switched off.
export OPAL_PREFIX="$prefix/usr"
export PMIX_MCA_mca_base_component_path="$lib/pmix2/lib/pmix"
export HWLOC_PLUGINS_PATH="$lib/hwloc"
export OMPI_MCA_plm=isolated OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_mtl=^ofi
export OMPI_MCA_osc=^ucx,pt2pt OMPI_MCA_btl_base_warn_component_unused=0
export OMPI_MCA_mca_base_component_show_load_errors=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}  # H200; skips torch's arch probe

# shellcheck disable=SC2206  # FLYWHEEL_GPU_CMAKE_ARGS is split on spaces on purpose
configure=(cmake -S "$root" -B "$build" -G Ninja "-DCMAKE_BUILD_TYPE=$build_type"
  "-DCMAKE_PREFIX_PATH=$torch_prefix;$prefix/usr;$lib/cmake;$prefix/usr/share/cmake"
  -DFLYWHEEL_WITH_CUDA=ON -DFLYWHEEL_WITH_NCCL=ON -DFLYWHEEL_BUILD_TESTS=ON
  -DFLYWHEEL_BUILD_BENCHMARKS=ON -DFLYWHEEL_USE_CCACHE=OFF
  "-DFLYWHEEL_NCCL_INCLUDE_DIR=$nccl_home/include" "-DFLYWHEEL_NCCL_LIBRARY=$nccl_lib"
  "-DCUDAToolkit_ROOT=$cuda_root" ${FLYWHEEL_GPU_CMAKE_ARGS:-})
build_tests=(cmake --build "$build" -j "$jobs" --target engine_gpu_test gpu_parity_test
  rollout_bench)
ctest_cmd=(ctest --test-dir "$build" -L gpu -V --output-on-failure --timeout 300)
bench=("$build/benchmarks/rollout_bench" --device cuda)
build_cli=(cmake --build "$build" -j "$jobs" --target flywheel)

if [[ "$mode" == dry ]]; then
  echo
  echo "gpu_check --dry-run: the environment and commands of a run"
  for v in PATH LD_LIBRARY_PATH PKG_CONFIG_PATH PKG_CONFIG_LIBDIR OPAL_PREFIX \
    PMIX_MCA_mca_base_component_path OMPI_MCA_plm OMPI_MCA_pml OMPI_MCA_btl; do
    echo "  $v=${!v}"
  done
  echo "  2. ${configure[*]}"
  echo "  3. ${build_tests[*]}"
  echo "  4. OMP_NUM_THREADS=1 ${ctest_cmd[*]}"
  echo "  5. ${bench[*]} --dtype float32; ${bench[*]} --dtype bfloat16"
  echo "  6. ${build_cli[*]}; $build/flywheel version"
  exit 0
fi

# --- 2. configure ----------------------------------------------------------------------------
stage_begin "configure"
rc=0
run_logged "$out/configure.log" "${configure[@]}" || rc=$?
# Where each dependency was found, and whether any came from outside the prefix.
deps_re='^(absl|gRPC|yaml-cpp|spdlog|fmt|CLI11|GTest|Torch)_DIR:|^c-ares_(INCLUDE_DIR|LIBRARY):'
deps_re+='|^Protobuf_(LIBRARY|PROTOC_EXECUTABLE|INCLUDE_DIR)(_RELEASE)?:|^MPI_CXX_COMPILER:'
deps_re+='|^MPI_mpi(_cxx)?_LIBRARY:|^MPIEXEC_EXECUTABLE:|^OPENSSL_(SSL|CRYPTO)_LIBRARY:'
deps_re+='|^OPENSSL_INCLUDE_DIR:|^ZLIB_(LIBRARY_RELEASE|INCLUDE_DIR):|^PKG_CONFIG_EXECUTABLE:'
deps_re+='|^pkgcfg_lib_(PCRE2|UTF8PROC)_[a-z0-9_-]+:|^RE2_(INCLUDE_DIRS|LIBRARY_DIRS):'
deps_re+='|^FLYWHEEL_NCCL_|^CUDAToolkit_NVCC_EXECUTABLE:'
found=$(grep -E "$deps_re" "$build/CMakeCache.txt" 2>/dev/null | sed 's/:[A-Z]*=/ = /' || true)
outside=$(awk -v p="$prefix" -v t="$torch_prefix" -v c="$cuda_root" -v n="$nccl_home" \
  '$3 ~ /^\// && index($3, p) != 1 && index($3, t) != 1 && index($3, c) != 1 && index($3, n) != 1' \
  <<<"$found")
{
  echo "--- found (CMakeCache.txt):"
  echo "$found"
  echo "--- found outside the prefix, torch, CUDA and NCCL:"
  echo "$outside"
} | tee -a "$out/configure.log"
stage_end "$rc" "$(grep -c . <<<"$outside" || true) found outside the prefix"
configure_rc=$rc
if [[ "$mode" == configure ]] || ((configure_rc != 0)); then
  printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
  exit "$configure_rc"
fi

# --- 3. build --------------------------------------------------------------------------------
stage_begin "build tests + rollout_bench"
rc=0
run_logged "$out/build.log" "${build_tests[@]}" || rc=$?
stage_end "$rc"

# --- 4. gpu tests ----------------------------------------------------------------------------
stage_begin "ctest -L gpu"
rc=0
if [[ -x "$build/tests/rollout/engine_gpu_test" || -x "$build/tests/trainer/gpu_parity_test" ]]; then
  OMP_NUM_THREADS=1 run_logged "$out/ctest.log" "${ctest_cmd[@]}" || rc=$?
  stage_end "$rc" "$(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -n 1)"
else
  echo "gpu_check: no gpu test binary was built" | tee "$out/ctest.log"
  stage_end skipped "not built"
fi

# --- 5. rollout_bench ------------------------------------------------------------------------
for dtype in float32 bfloat16; do
  stage_begin "rollout_bench $dtype"
  rc=0
  if [[ -x "${bench[0]}" ]]; then
    run_logged "$out/rollout_bench_$dtype.txt" "${bench[@]}" --dtype "$dtype" || rc=$?
    stage_end "$rc"
  else
    echo "gpu_check: rollout_bench was not built" | tee "$out/rollout_bench_$dtype.txt"
    stage_end skipped "not built"
  fi
done

# --- 6. the flywheel binary ------------------------------------------------------------------
stage_begin "build flywheel"
rc=0
run_logged "$out/build_flywheel.log" "${build_cli[@]}" || rc=$?
if ((rc == 0)); then
  "$build/flywheel" version >"$out/flywheel_version.txt" 2>&1 || rc=$?
  cat "$out/flywheel_version.txt"
fi
stage_end "$rc"

echo
echo "=== gpu_check summary ($(elapsed "$t0") s in all; outputs in $out)"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
status=0
for line in "${summary[@]}"; do
  [[ "$line" =~ \ rc\ 0\  ]] || status=1
done
exit "$status"
