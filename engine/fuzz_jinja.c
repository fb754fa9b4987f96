/* libFuzzer target: any bytes as a chat template, parsed and, when it parses, rendered over a
 * short conversation. Built with clang -fsanitize=fuzzer,address,undefined
 * (engine/CMakeLists.txt); ctest runs it briefly from the seeds in tests/engine/jinja_seeds. */
#include <stdint.h>
#include <stdlib.h>

#include "jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[256];
  kr_jinja *t = kr_jinja_parse((const char *)data, size, err, sizeof err);
  if (!t) return 0;
  kr_jvars *v = kr_jvars_new();
  if (v && !kr_jvars_message(v, "system", "Be brief.") &&
      !kr_jvars_message(v, "user", " Hi <think>a</think> caf\xc3\xa9\n") &&
      !kr_jvars_message(v, "assistant", "Hello!") && !kr_jvars_message(v, "user", "1+1?") &&
      !kr_jvars_bool(v, "add_generation_prompt", 1) && !kr_jvars_str(v, "bos_token", "<s>") &&
      !kr_jvars_str(v, "eos_token", "</s>") && !kr_jvars_none(v, "tools")) {
    char *out = NULL;
    if (kr_jinja_render(t, v, &out, NULL, err, sizeof err) == 0) free(out);
  }
  kr_jvars_free(v);
  kr_jinja_free(t);
  return 0;
}
