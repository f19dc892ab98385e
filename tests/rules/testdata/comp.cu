// Analysis-test fixture: never compiled by these tests (analysis only).
#define PL_COMPONENT comp
#include <pipelink.h>
PL_ENTRY(run) {}
