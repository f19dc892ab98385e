// Analysis-test fixture: never compiled by these tests (analysis only).
#define PL_COMPONENT other
#include <pipelink.h>
PL_ENTRY(run) {}
