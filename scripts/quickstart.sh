#!/usr/bin/env bash
# The quickstarts: RL that visibly raises held-out accuracy on a laptop CPU in minutes.
#   scripts/quickstart.sh                # addition, seed 7, everything under runs/quickstart/
#   SEED=11 scripts/quickstart.sh        # another seed, under runs/quickstart-seed11/
#   scripts/quickstart.sh calculator     # multi-turn: the model calls a calculator environment,
#                                        # under runs/quickstart-calculator/ (SEED works too)
#   scripts/quickstart.sh moe            # addition with a Qwen3-MoE model (8 experts, 2 per
#                                        # token) and rollout routing replay, runs/quickstart-moe/
#   scripts/quickstart.sh lora           # addition with LoRA rank 8 adapters (base frozen, adapters
#                                        # only published), runs/quickstart/rl-lora/
# Steps: bootstrap (packages + build; a no-op when up to date), the synthetic task (generated
# from the seed; addition: 3-digit sums, every number written least-significant digit first;
# calculator: a 3-digit times a 2-digit number, with demonstration episodes), a small random
# Qwen2-architecture model, a short SFT warm-up that stops at >= 25% held-out accuracy (cached:
# reused when present; for the calculator, accuracy of greedy episodes), then `flywheel train`
# with configs/quickstart.yaml or configs/quickstart_calculator.yaml: DAPO with 2 learner ranks
# and 1 rollout worker, asynchronous.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
which=${1:-addition}
case "$which" in
  addition | calculator | moe | lora) ;;
  *) echo "usage: scripts/quickstart.sh [addition|calculator|moe|lora]" >&2; exit 2 ;;
esac
build_dir=${FLYWHEEL_BUILD_DIR:-build}
[[ "${FLYWHEEL_SKIP_BOOTSTRAP:-0}" == 1 ]] || scripts/bootstrap.sh  # idempotent
flywheel="$build_dir/flywheel"
seed=${SEED:-7}
# The small random model the warm-up starts from.
init_config='{"model_type": "qwen2", "vocab_size": 100, "hidden_size": 128, "intermediate_size": 512,
 "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
 "eos_token_id": 2, "max_position_embeddings": 64, "tie_word_embeddings": true}'
rl=()
rl_dir=rl
if [[ "$which" == addition || "$which" == moe || "$which" == lora ]]; then
  run=runs/quickstart
  config=configs/quickstart.yaml
  task=(addition --digit-order lsd --digits 3 --train 20000 --eval 200 --seed "$seed")
  sft_data=train.jsonl
  sft=(--set trainer.lr=1e-3)
  if [[ "$which" == moe ]]; then
    # The same width per token as the dense model: 2 of 8 experts of 256, against one MLP of 512.
    run=runs/quickstart-moe
    init_config='{"model_type": "qwen3_moe", "vocab_size": 100, "hidden_size": 128,
 "intermediate_size": 512, "num_hidden_layers": 3, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 32, "num_experts": 8, "num_experts_per_tok": 2,
 "moe_intermediate_size": 256, "norm_topk_prob": true, "eos_token_id": 2,
 "max_position_embeddings": 64, "tie_word_embeddings": true}'
    rl=(--set algorithm.router_replay=r3)
  fi
  if [[ "$which" == lora ]]; then  # the addition warm-up, then RL of rank-8 adapters only
    rl_dir=rl-lora
    rl=(--set trainer.lora.rank=8 --set trainer.lr=1.5e-3)
  fi
else
  run=runs/quickstart-calculator
  config=configs/quickstart_calculator.yaml
  task=(calculator --digits 3 --train 20000 --eval 200 --demos 1000 --seed "$seed")
  sft_data=sft.jsonl  # demonstration episodes, cut into their model turns
  # Episode accuracy jumps from a few percent to over half within a few steps: the config
  # evaluates every 2 steps (every step near the stop), on 100 episodes to keep that cheap.
  sft=(--set trainer.lr=1e-3 --set eval.max_prompts=100)
fi
[[ "$seed" == 7 ]] || run=$run-seed$seed
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
if [[ $(id -u) == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
start=$(date +%s)
paths=(--set "model.path=$run/sft/hf" --set "data.train_path=$run/data/train.jsonl"
       --set "data.eval_path=$run/data/eval.jsonl" --set "data.seed=$seed"
       --set "trainer.seed=$seed" --set "rollout.seed=$seed")

"$flywheel" version
# The cached warm-up is reused only for the same task and warm-up settings (an older cache may
# hold another format or stop elsewhere).
key="${task[*]} ${sft[*]} $(grep -h 'stop_at_accuracy:' "$config")"
if [[ ! -f "$run/sft/hf/model.safetensors" || "$(cat "$run/task" 2>/dev/null)" != "$key" ]]; then
  rm -rf "$run/data" "$run/init" "$run/sft" "$run/task"
  "$flywheel" make-data "${task[@]}" --out "$run/data"
  mkdir -p "$run/init"
  echo "$init_config" > "$run/init/config.json"
  "$flywheel" init-model --config "$run/init/config.json" --out "$run/init" --char-tokenizer \
    --seed "$seed"
  echo "== SFT warm-up (stops at sft.stop_at_accuracy of $config) =="
  mpirun -np 2 --oversubscribe --bind-to none "$flywheel" sft "$config" \
    "${paths[@]}" --set "model.path=$run/init" --set "logging.run_dir=$run/sft" \
    --set "data.train_path=$run/data/$sft_data" \
    "${sft[@]}" --set trainer.lr_schedule=constant --set trainer.warmup_steps=10 \
    --set trainer.total_steps=3000 \
    --set checkpoint.every_steps=0 --set checkpoint.resume=never \
    --set logging.console_interval_s=10
  echo "$key" > "$run/task"
else
  echo "== SFT warm-up: reusing $run/sft/hf =="
fi
echo "== RL: flywheel train $config =="
"$flywheel" train "$config" "${paths[@]}" "${rl[@]}" --set "logging.run_dir=$run/$rl_dir" --overwrite
echo "quickstart finished in $(( $(date +%s) - start )) s; plot: $run/$rl_dir/plot.png"
