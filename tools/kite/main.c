/*
 * kite: the command-line tool of the kite library.
 *   kite            what this machine has: backends, plugins, kernels, a quick check, a quick bench
 *   kite list       every registered kernel and whether it runs here
 *   kite check      the conformance harness: every kernel against ref
 *   kite bench      GB/s of every kernel beside a memcpy ceiling and ref
 *   kite run        text generation with a GGUF model (engine/)
 *   kite serve      an OpenAI-compatible HTTP server over that engine
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "run.h"
#ifdef KITE_HAVE_SERVE
#include "serve.h"
#endif
#include "util.h"

static void usage(void) {
  printf(
      "kite %d.%d.%d: LLM operators behind one kernel registry\n"
      "\n"
      "usage: kite [COMMAND] [OPTIONS]\n"
      "\n"
      "  (none)   summary: backends, plugins, kernels that run here, a quick check and bench\n"
      "  list     every registered kernel: device, priority, features, runs here or why not\n"
      "  check    conformance harness: every kernel that runs here against ref\n"
      "  bench    benchmark harness: time, GB/s vs memcpy, speedup over ref; --dispatch\n"
      "  run      generate text with a GGUF model (SmolLM2, llama, Mistral, Qwen2) on kite's ops\n"
      "  serve    an OpenAI-compatible HTTP server over a GGUF model\n"
      "  help     this text (kite COMMAND --help for a command's options)\n"
      "\n"
      "Environment: KITE_KERNELS (kernel selection, e.g. \"rms_norm=cpu.avx2,-cuda\"),\n"
      "KITE_BACKEND_PATH (plugin folders), KITE_LOG=dispatch (which kernel ran and why).\n",
      KITE_VERSION_MAJOR, KITE_VERSION_MINOR, KITE_VERSION_PATCH);
}

/* Plain `kite`: what a newcomer needs to know about this machine. */
static int summary(void) {
  double t0 = kt_now();
  printf("kite %d.%d.%d: LLM operators behind one kernel registry\n\n", KITE_VERSION_MAJOR,
         KITE_VERSION_MINOR, KITE_VERSION_PATCH);

  size_t nk = kite_kernel_count(), nb = kite_backend_count();
  printf("backends:\n  %-12s %-6s %-8s %-8s %s\n", "name", "device", "devices", "kernels", "from");
  for (size_t i = 0; i < nb; i++) {
    kite_backend_info b;
    if (kite_backend_get(i, &b) != KITE_OK) continue;
    printf("  %-12s %-6s %-8d %-8zu %s\n", b.name, kite_device_name(b.device_type), b.device_count,
           b.num_kernels, b.path && b.path[0] ? b.path : "built in");
  }
  size_t nf = kite_plugin_failure_count();
  if (nf == 0) {
    printf("plugin failures: none\n");
  } else {
    printf("plugin failures:\n");
    for (size_t i = 0; i < nf; i++) {
      const char *path = "", *reason = "";
      if (kite_plugin_failure_get(i, &path, &reason) == KITE_OK) printf("  %s: %s\n", path, reason);
    }
  }

  kt_registry reg;
  if (kt_registry_load(&reg)) {
    fprintf(stderr, "kite: cannot read the registry: %s\n", kite_last_error());
    return 2;
  }
  size_t here = 0;
  int ops_here = 0, ops_none = 0;
  for (size_t i = 0; i < reg.n; i++) here += reg.k[i].runs_here != 0;
  for (int op = 0; op < KITE_OP_COUNT; op++) {
    int any = 0;
    for (size_t i = 0; i < reg.n; i++) any |= (int)reg.k[i].op == op && reg.k[i].runs_here;
    if (any)
      ops_here++;
    else
      ops_none++;
  }
  printf("kernels: %zu registered, %zu run here, covering %d of %d ops", nk, here, ops_here,
         KITE_OP_COUNT);
  if (ops_none) printf(" (%d without a kernel here: see kite list)", ops_none);
  printf("\n");
  const char *cfg = kite_config_get();
  if (kite_config_error()[0]) {
    printf("config: ERROR: %s\n", kite_config_error());
    kt_registry_free(&reg);
    fprintf(stderr, "kite: no op runs with this config: fix KITE_KERNELS first\n");
    return 2;
  }
  if (cfg[0]) printf("config: %s\n", cfg);
  kt_registry_free(&reg);

  printf("\nquick check (all kernels that run here against ref; kite check for the full set):\n");
  fflush(stdout);
  int rc = kt_check_quick();

  printf("\nquick bench (kite bench for every kernel and shape):\n");
  fflush(stdout);
  kt_bench_summary();

  printf("\nnext:\n"
         "  kite list                 every kernel, where it runs, what default dispatch picks\n"
         "  kite check [--op NAME]    the full conformance check against ref\n"
         "  kite bench [--op NAME]    GB/s per kernel and shape, vs memcpy and ref\n"
         "  kite bench --dispatch     the cost of a call through the API\n"
         "(%.1f s)\n",
         kt_now() - t0);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) return summary();
  const char *cmd = argv[1];
  if (strcmp(cmd, "list") == 0) return kt_cmd_list(argc - 2, argv + 2);
  if (strcmp(cmd, "check") == 0 || strcmp(cmd, "bench") == 0) {
    /* they pin kernels through kite_config_set, which would replace a KITE_KERNELS that does not
     * parse and so hide it */
    if (kite_config_error()[0]) {
      fprintf(stderr, "kite %s: %s\n", cmd, kite_config_error());
      return 2;
    }
    return cmd[0] == 'c' ? kt_cmd_check(argc - 2, argv + 2) : kt_cmd_bench(argc - 2, argv + 2);
  }
  if (strcmp(cmd, "run") == 0) return kr_cmd_run(argc - 2, argv + 2);
  if (strcmp(cmd, "serve") == 0) {
#ifdef KITE_HAVE_SERVE
    return kr_cmd_serve(argc - 2, argv + 2);
#else
    fprintf(stderr, "kite serve: not built (libmicrohttpd-dev and libcjson-dev were missing when "
                    "this build was configured)\n");
    return 1;
#endif
  }
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    usage();
    return 0;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    printf("kite %d.%d.%d\n", KITE_VERSION_MAJOR, KITE_VERSION_MINOR, KITE_VERSION_PATCH);
    return 0;
  }
  fprintf(stderr, "kite: unknown command '%s'\n\n", cmd);
  usage();
  return 2;
}
