/* The kite CLI subcommands (main.c dispatches to them). Each returns the process exit code. */
#ifndef KITE_TOOLS_CLI_H
#define KITE_TOOLS_CLI_H

int kt_cmd_list(int argc, char **argv);
int kt_cmd_check(int argc, char **argv);
int kt_cmd_bench(int argc, char **argv);

/* For plain `kite`: the quick conformance check over every kernel that runs here (failures and
 * the final count only), and a short benchmark of default dispatch against ref. */
int kt_check_quick(void);
void kt_bench_summary(void);

#endif /* KITE_TOOLS_CLI_H */
