// greedy_ids: greedy decoding from prompt token ids with llama.cpp; prints the generated ids
// (one JSON line) and, on stderr, each step's top-1 / top-2 logit margin.
//   greedy_ids MODEL.gguf N_PREDICT THREADS ID [ID ...]
#include <stdio.h>
#include <stdlib.h>
#include "llama.h"

static void quiet(enum ggml_log_level level, const char * text, void * ud) {
    (void) ud;
    if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

int main(int argc, char ** argv) {
    if (argc < 5) { fprintf(stderr, "usage: %s MODEL N_PREDICT THREADS ID [ID ...]\n", argv[0]); return 2; }
    const char * path = argv[1];
    const int n_predict = atoi(argv[2]);
    const int threads = atoi(argv[3]);
    const int n_prompt = argc - 4;
    llama_token * prompt = malloc(sizeof(llama_token) * n_prompt);
    for (int i = 0; i < n_prompt; i++) prompt[i] = atoi(argv[4 + i]);

    llama_log_set(quiet, NULL);
    ggml_backend_load_all();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model * model = llama_model_load_from_file(path, mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", path); return 1; }
    const struct llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_prompt + n_predict + 16;
    cp.n_batch = n_prompt;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    struct llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create context\n"); return 1; }

    struct llama_batch batch = llama_batch_get_one(prompt, n_prompt);
    llama_token tok;
    printf("{\"ids\": [");
    for (int step = 0; step < n_predict; step++) {
        if (llama_decode(ctx, batch)) { fprintf(stderr, "decode failed\n"); return 1; }
        const float * logits = llama_get_logits_ith(ctx, -1);
        int best = 0, second = -1;
        for (int v = 1; v < n_vocab; v++) {
            if (logits[v] > logits[best]) { second = best; best = v; }
            else if (second < 0 || logits[v] > logits[second]) second = v;
        }
        fprintf(stderr, "step %d: id %d logit %.6f, runner-up %d margin %.6f\n", step, best,
                logits[best], second, logits[best] - logits[second]);
        tok = best;
        printf("%s%d", step ? ", " : "", tok);
        batch = llama_batch_get_one(&tok, 1);  // no EOS stop: like --ignore-eos
    }
    printf("]}\n");
    llama_free(ctx);
    llama_model_free(model);
    free(prompt);
    return 0;
}
