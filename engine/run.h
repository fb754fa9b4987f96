/* The `kite run` subcommand (engine/run.c): text generation with a GGUF model. */
#ifndef KITE_ENGINE_RUN_H
#define KITE_ENGINE_RUN_H

#include "gguf.h"

/* argv holds the options after "run"; returns the process exit code. */
int kr_cmd_run(int argc, char **argv);

#endif /* KITE_ENGINE_RUN_H */
