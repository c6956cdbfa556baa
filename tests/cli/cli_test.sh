#!/usr/bin/env bash
# End-to-end checks of the `flywheel` binary. Usage: cli_test.sh FLYWHEEL SOURCE_DIR CASE
set -uo pipefail
flywheel=$1
src=$2
case_name=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL ($case_name): $*" >&2; exit 1; }
# expect_exit CODE CMD...: runs CMD, keeps stdout+stderr in $out, checks the exit code.
expect_exit() {
  local want=$1; shift
  out=$("$@" 2>&1); local got=$?
  [[ $got -eq $want ]] || fail "exit $got (wanted $want) from: $*"$'\n'"$out"
}
expect_output() { grep -qF -- "$1" <<<"$out" || fail "output lacks '$1':"$'\n'"$out"; }

case "$case_name" in
  version)
    expect_exit 0 "$flywheel" version
    for s in "flywheel 0.1" "LibTorch " "gRPC 1." "Protobuf " "MPI " "CUDA: " "NCCL: "; do
      expect_output "$s"
    done ;;
  help)
    expect_exit 0 "$flywheel" --help
    for sub in version validate-config config-doc plot; do expect_output "$sub"; done
    for sub in version validate-config config-doc plot; do
      expect_exit 0 "$flywheel" "$sub" --help
      expect_output "Usage: flywheel $sub"
    done
    expect_exit 2 "$flywheel" no-such-command
    expect_exit 2 "$flywheel" ;;
  validate_quickstart)
    expect_exit 0 "$flywheel" validate-config "$src/configs/quickstart.yaml"
    expect_output "group_size: 4"
    expect_output "is valid" ;;
  validate_override)
    expect_exit 0 "$flywheel" validate-config "$src/configs/quickstart.yaml" \
      --set trainer.lr=0.5 --set rollout.stop='["###"]'
    expect_output "lr: 0.5"
    expect_output 'stop: ["###"]' ;;
  validate_typo)
    printf 'trainer:\n  total_steps: 3\n  lrr: 0.1\n' > "$work/typo.yaml"
    expect_exit 2 "$flywheel" validate-config "$work/typo.yaml"
    expect_output "$work/typo.yaml:3:3: trainer.lrr: unknown key; did you mean 'trainer.lr'?" ;;
  validate_bad_override)
    expect_exit 2 "$flywheel" validate-config "$src/configs/quickstart.yaml" --set trainer.lr=fast
    expect_output "--set trainer.lr=fast: trainer.lr: expected a finite number, got 'fast'" ;;
  validate_missing_config)
    expect_exit 2 "$flywheel" validate-config "$work/none.yaml"
    expect_output "no such file" ;;
  validate_missing_plugin)
    printf 'plugins: [./libmissing.so]\n' > "$work/p.yaml"
    expect_exit 2 "$flywheel" validate-config "$work/p.yaml"
    expect_output "$work/p.yaml:1:10: plugins: plugin file '$work/libmissing.so' does not exist" ;;
  validate_unknown_sink)
    printf 'logging:\n  sinks: [console, jsnol]\n' > "$work/s.yaml"
    expect_exit 2 "$flywheel" validate-config "$work/s.yaml"
    expect_output "logging.sinks: unknown metrics_sink 'jsnol'"
    expect_output "did you mean 'jsonl'?" ;;
  config_doc)
    expect_exit 0 "$flywheel" config-doc --output "$work/config.md"
    cmp -s "$work/config.md" "$src/docs/config.md" || fail "docs/config.md is out of date" ;;
  plot)
    mkdir -p "$work/run"
    for step in 1 2 3 4 5; do
      printf '{"step": %d, "wall_time": 1.0, "scalars": {"loss": %d.5, "reward": "nan"}}\n' \
        "$step" "$((10 - step))" >> "$work/run/metrics.jsonl"
    done
    printf '{"step": 6, "wall' >> "$work/run/metrics.jsonl"  # a torn last line
    expect_exit 0 "$flywheel" plot "$work/run" --metrics loss --output "$work/loss.png"
    expect_output "skipped 1 malformed line"
    [[ "$(head -c 8 "$work/loss.png" | od -An -tx1 | tr -d ' \n')" == "89504e470d0a1a0a" ]] ||
      fail "not a PNG"
    expect_exit 2 "$flywheel" plot "$work/run" --metrics los
    expect_output "unknown metric 'los'; known: loss; did you mean 'loss'?"
    expect_exit 2 "$flywheel" plot "$work/nothing" ;;
  *) fail "unknown case" ;;
esac
echo "PASS ($case_name)"
