#!/usr/bin/env bash
# Downloads into .gpu-deps/ the Debian 12 .deb files of flywheel's build dependencies that a
# PyTorch-only GPU image lacks (gRPC, Protobuf, Abseil, yaml-cpp, spdlog, fmt, CLI11,
# nlohmann-json, OpenMPI, GoogleTest, pcre2, utf8proc, pkg-config), so that
# scripts/gpu_check.sh can unpack them there with `dpkg -x` into a prefix. Run it here, on the
# Debian 12 development machine; carry `.gpu-deps` to the GPU machine. Installs nothing: it
# only reads apt's package lists (apt-cache depends) and fetches .deb files (apt-get download).
#
#   scripts/gpu_deps.sh            # downloads what is missing, prints the total size
#
# The closure is resolved level by level with `apt-cache depends` (the first alternative of each
# `a | b` group; a virtual package by its first provider), and does not descend into:
#   - base: libraries every Ubuntu 24.04 image with python3 and a compiler has (listed below);
#   - skipped: what flywheel does not use (see the comment at `skipped`).
# Environment: FLYWHEEL_GPU_DEPS_DIR (default: .gpu-deps).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${FLYWHEEL_GPU_DEPS_DIR:-$root/.gpu-deps}

# The build dependencies of scripts/bootstrap.sh's list that the GPU image lacks (it has a
# compiler, CMake, Ninja, CUDA, LibTorch and NCCL from pip). pkgconf: pkg_check_modules needs a
# pkg-config, which a minimal image may not have.
roots=(
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
  libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev
  libpcre2-dev libutf8proc-dev libzstd-dev
  pkgconf
)

# Base system: on every Ubuntu 24.04 image (glibc, the GCC runtime, and the libraries python3,
# apt and coreutils themselves need). Their -dev symlinks (libssl.so, libz.so, libpcre2-8.so)
# are carried and gpu_check.sh points them at the image's libraries. libudev1 is carried
# (libhwloc needs it, and a minimal container may not have it).
base=(
  libc6 libgcc-s1 libstdc++6 gcc-12-base libgomp1 libatomic1 libquadmath0
  zlib1g libssl3 libzstd1 liblzma5 libbz2-1.0 libcrypt1 libffi8 libgmp10
  libselinux1 libpcre2-8-0 libtinfo6 libuuid1 libacl1 libmd0 libbsd0
  libcap-ng0 libaudit1 libaudit-common libpam0g libpam-modules libpam-modules-bin
  libdb5.3 libsemanage2 libsemanage-common libsepol2
  debconf cdebconf dpkg tar perl-base debianutils adduser passwd install-info
)

# Skipped, on purpose:
#   - the toolchain: the image's own compiler (nvcc's host GCC) brings libc6-dev, binutils,
#     libstdc++-dev; gfortran is only for OpenMPI's Fortran bindings.
#   - ssh: mpirun on one host needs no remote launcher (gpu_check.sh sets OMPI_MCA_plm=isolated).
#   - OpenMPI's network transports (UCX, libfabric, PSM, PSM2, verbs/RDMA): libmpi, libopen-rte
#     and libopen-pal need none of them (readelf -d: hwloc, libevent, zlib, and pmix needs munge);
#     only the plugins mca_pml_ucx, mca_btl_ofi/openib, mca_mtl_ofi/psm/psm2, mca_osc_ucx and
#     mca_atomic_ucx do, and those then fail to load. One host uses the self and vader
#     (shared-memory) BTLs with pml ob1, which gpu_check.sh selects.
#   - hwloc's plugins (X11 / OpenCL / NVML topology probes): optional for libhwloc.
#   - -dev packages that OpenMPI's wrappers never name: `mpicxx --showme` links -lmpi_cxx -lmpi
#     only (hwloc, libevent, pmix, numa, ltdl, netlink headers are for static or plugin builds).
#   - catch2 (spdlog's tests), jQuery (OpenMPI's HTML docs), perl.
skipped=(
  gcc gcc-12 g++ g++-12 cpp cpp-12 binutils binutils-common binutils-x86-64-linux-gnu
  libc6-dev libc-dev-bin linux-libc-dev libcrypt-dev libstdc++-12-dev libgcc-12-dev
  gfortran gfortran-12 libgfortran-12-dev libgfortran5
  openssh-client
  libucx0 libfabric1 libpsm-infinipath1 libpsm2-2 libibverbs1 librdmacm1 ibverbs-providers
  libibverbs-dev
  libhwloc-plugins
  libhwloc-dev libevent-dev libpmix-dev libnuma-dev libltdl-dev libnl-3-dev libnl-route-3-dev
  catch2 libjs-jquery libjs-jquery-ui perl
)

declare -A seen=() excluded=()
for p in "${base[@]}"; do excluded[$p]=base; done
for p in "${skipped[@]}"; do excluded[$p]=skipped; done

# The first alternative of each dependency group of every package given, one per line; a
# virtual package is replaced by its first provider.
direct_deps() {
  apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances "$@" | awk '
    /^[^ ]/ { group = 0; want_provider = 0; next }
    /^    / { if (want_provider) { print $1; want_provider = 0 } next }
    /^ [ |](Pre)?Depends: / {
      if (!group) {
        if ($2 ~ /^</) want_provider = 1; else { print $2; want_provider = 0 }
      } else if (want_provider && $2 !~ /^</) { print $2; want_provider = 0 }
      group = (substr($0, 2, 1) == "|")
    }'
}

level=("${roots[@]}")
for p in "${level[@]}"; do seen[$p]=1; done
hit_excluded=()
while ((${#level[@]} > 0)); do
  next=()
  while read -r d; do
    d=${d%:any}
    [[ -n "$d" && -z "${seen[$d]:-}" ]] || continue
    seen[$d]=1
    if [[ -n "${excluded[$d]:-}" ]]; then
      hit_excluded+=("$d (${excluded[$d]})")
      continue
    fi
    next+=("$d")
  done < <(direct_deps "${level[@]}" | sort -u)
  level=("${next[@]}")
done

packages=()
for p in "${!seen[@]}"; do
  [[ -z "${excluded[$p]:-}" ]] && packages+=("$p")
done
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort)

mkdir -p "$out"
# Only the candidate versions stay: a .deb of another version (an older run) is removed.
# The file names apt-get download gives the candidate versions (name_version_arch.deb).
mapfile -t want < <(apt-get download --print-uris "${packages[@]}" | awk '{ print $2 }')
if ((${#want[@]} != ${#packages[@]})); then
  echo "gpu_deps: apt-get download --print-uris named ${#want[@]} files for ${#packages[@]}" \
    "packages" >&2
  exit 1
fi
for f in "$out"/*.deb; do
  [[ -e "$f" ]] || continue
  keep=0
  for w in "${want[@]}"; do [[ "$(basename "$f")" == "$w" ]] && keep=1; done
  if ((keep == 0)); then rm -f "$f"; fi
done
missing=()
for w in "${want[@]}"; do
  [[ -f "$out/$w" ]] || missing+=("${w%%_*}")
done
if ((${#missing[@]} > 0)); then
  echo "gpu_deps: downloading ${#missing[@]} package(s) into $out"
  (cd "$out" && apt-get download -q "${missing[@]}")
fi

# The manifest gpu_check.sh prints: package versions, and what was left out and why.
{
  echo "# flywheel GPU build dependencies: Debian $(cat /etc/debian_version) .debs, unpacked by"
  echo "# scripts/gpu_check.sh with dpkg -x. Made by scripts/gpu_deps.sh on $(date -u +%F)."
  for w in "${want[@]}"; do echo "$w"; done
  echo "# not carried (base: on the image; skipped: not used by flywheel):"
  printf '#   %s\n' "${hit_excluded[@]}" | sort
} > "$out/MANIFEST"

bytes=$(cat "$out"/*.deb | wc -c)
echo "gpu_deps: ${#packages[@]} packages, $((bytes / 1024)) KiB ($(awk -v b="$bytes" \
  'BEGIN { printf "%.1f", b / 1048576 }') MiB) in $out"
find "$out" -maxdepth 1 -name '*.deb' -printf '%s %f\n' | sort -k2 | awk '{ printf "  %6d KiB  %s\n", $1 / 1024, $2 }'
echo "gpu_deps: not carried: ${hit_excluded[*]}"
