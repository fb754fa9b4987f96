/*
 * kite list: every registered kernel (op, backend.variant, device, priority, features, whether
 * it runs here and why not, description), then what default dispatch picks per op and device.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "util.h"

static void usage(void) {
  printf("usage: kite list [--op NAME] [--backend NAME] [--long]\n"
         "\n"
         "One row per registered kernel: op, backend.variant, device, priority, whether it runs\n"
         "here (or why not) and how often it failed at run time in this process; with --long also\n"
         "its required features and a description. Then, per op, the\n"
         "kernel default dispatch picks on each device present (the highest-priority kernel\n"
         "that runs here; a kernel's supports() may still decline particular arguments).\n"
         "A built-in kernel that a plugin's kernel outranks says \"overridden by plugin kernel\"\n"
         "with the plugin's file. A KITE_KERNELS that does not parse is shown first (exit 1).\n"
         "\n"
         "  --op NAME        only this op\n"
         "  --backend NAME   only this backend (\"cpu\") or kernel (\"cpu.avx2\")\n"
         "  --long           also the features and description columns (wide)\n");
}

static int width(int w, const char *s) {
  int n = (int)strlen(s);
  return n > w ? n : w;
}

/* The best plugin kernel of k's op and device that runs here and outranks the built-in kernel k
 * (a vendor override), or NULL. */
static const kt_kernel *plugin_above(const kt_registry *reg, const kt_kernel *k) {
  const kt_kernel *best = NULL;
  for (size_t i = 0; i < reg->n; i++) {
    const kt_kernel *p = &reg->k[i];
    if (p->plugin[0] && p->runs_here && p->op == k->op && p->device == k->device &&
        p->priority > k->priority && (!best || p->priority > best->priority))
      best = p;
  }
  return best;
}

int kt_cmd_list(int argc, char **argv) {
  kt_opts o;
  int rc = kt_parse_opts(argc, argv, "--op --backend --long", &o);
  if (rc) return rc;
  if (o.help) {
    usage();
    return 0;
  }
  kt_registry reg;
  if (kt_registry_load(&reg)) {
    fprintf(stderr, "kite list: cannot read the registry: %s\n", kite_last_error());
    return 2;
  }
  if (o.backend && !kt_backend_known(&reg, o.backend)) {
    fprintf(stderr, "kite list: no kernel of backend '%s' is registered\n", o.backend);
    kt_registry_free(&reg);
    return 2;
  }
  const char *cfg_error = kite_config_error();
  if (cfg_error[0]) printf("config: ERROR: %s\n\n", cfg_error);

  /* column widths from the data */
  int wop = 2, wname = 6, wfeat = 8, wdesc = 11;
  for (int op = 0; op < KITE_OP_COUNT; op++) wop = width(wop, kite_op_name((kite_op)op));
  for (size_t i = 0; i < reg.n; i++) {
    const kt_kernel *k = &reg.k[i];
    if (!kt_kernel_selected(k, &o)) continue;
    wname = width(wname, k->name);
    wfeat = width(wfeat, k->features[0] ? k->features : "-");
    wdesc = width(wdesc, k->description);
  }

  /* "runs here" last: its reasons are long. Without --long the features and descriptions stay
   * out, so that a row fits a terminal. */
  if (!o.verbose) wfeat = wdesc = 0;
  printf("%-*s  %-*s  %-6s  %8s  ", wop, "op", wname, "kernel", "device", "priority");
  if (o.verbose) printf("%-*s  %-*s  ", wfeat, "features", wdesc, "description");
  printf("runs here\n");
  int shown = 0;
  for (int op = 0; op < KITE_OP_COUNT; op++) {
    if (o.op >= 0 && op != o.op) continue;
    int rows = 0;
    for (size_t i = 0; i < reg.n; i++) {
      const kt_kernel *k = &reg.k[i];
      if ((int)k->op != op || !kt_kernel_selected(k, &o)) continue;
      char run[512];
      const kt_kernel *over = k->runs_here && !k->plugin[0] ? plugin_above(&reg, k) : NULL;
      if (over)
        snprintf(run, sizeof run, "yes, overridden by plugin kernel %s (%s)", over->name,
                 over->plugin);
      else if (k->runs_here)
        snprintf(run, sizeof run, "yes");
      else
        snprintf(run, sizeof run, "no: %s", k->why_not[0] ? k->why_not : "?");
      char last[192];
      long failed = kite_kernel_failures(k->index, last, sizeof last);
      printf("%-*s  %-*s  %-6s  %8d  ", wop, k->op_name, wname, k->name,
             kite_device_name(k->device), k->priority);
      if (o.verbose)
        printf("%-*s  %-*s  ", wfeat, k->features[0] ? k->features : "-", wdesc, k->description);
      printf("%s", run);
      if (failed)
        printf("; failed %ld call%s at run time (last: %s)", failed, failed == 1 ? "" : "s", last);
      printf("\n");
      rows++, shown++;
    }
    if (rows == 0)
      printf("%-*s  %-*s  %s\n", wop, kite_op_name((kite_op)op), wname, "-",
             o.backend ? "(no kernel of this backend)" : "(no kernel registered)");
  }

  /* default dispatch, per op and device type present */
  kt_devices dev;
  if (kt_devices_open(&dev, 0) == 0) {
    printf("\ndefault dispatch (highest priority that runs here):\n");
    for (int op = 0; op < KITE_OP_COUNT; op++) {
      if (o.op >= 0 && op != o.op) continue;
      printf("  %-*s", wop, kite_op_name((kite_op)op));
      for (int d = 0; d < dev.n; d++) {
        const kt_kernel *k = kt_default_kernel(&reg, (kite_op)op, dev.type[d]);
        printf("  %s: %-*s", kite_device_name(dev.type[d]), d + 1 < dev.n ? wname : 0,
               k ? k->name : "(none)");
      }
      printf("\n");
    }
    kt_devices_close(&dev);
  }
  printf("\n%d kernel%s shown, %zu registered.\n", shown, shown == 1 ? "" : "s", reg.n);
  kt_registry_free(&reg);
  if (cfg_error[0]) {
    fprintf(stderr, "kite list: %s\n", cfg_error);
    return 1;
  }
  return 0;
}
