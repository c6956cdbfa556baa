#!/usr/bin/env bash
# Closed configuration choices are enums resolved once at load (core/options/, core/choice.h):
# no file outside core's options compares a config key against a string literal. The typed
# fields make `c.model.device == "cuda"` a compile error; this catches the string-typed keys
# that remain (checkpoint.resume, paths, plugin names) being used as if they were choices.
# Usage: config_choices_test.sh SOURCE_DIR
set -uo pipefail
src=$1
sections='model|tokenizer|data|rollout|algorithm|rewards|trainer|buffer|weight_sync|cluster|eval|checkpoint|logging|sft|environment'
pattern="\\b(${sections})\\.[a-z_]+\\s*(==|!=)\\s*\""
hits=$(grep -rnE "$pattern" "$src/src" "$src/include" --include='*.cc' --include='*.h' |
         grep -vE "^$src/(src|include/flywheel)/core/options/")
if [[ -n "$hits" ]]; then
  echo "config_choices: a config key compared with a string outside core's options (make it a" >&2
  echo "choice enum, or resolve it there):" >&2
  echo "$hits" >&2
  exit 1
fi
# The check itself must see such a comparison.
probe=$(printf 'if (c.model.device == "cuda") {}\n' | grep -cE "$pattern")
[[ "$probe" == 1 ]] || { echo "config_choices: the pattern no longer matches" >&2; exit 1; }
echo "config_choices: no string comparison of a config choice outside core's options"
