// A role that syncs on named barrier 9 written as a literal instead of PL_BARRIER(name):
// pack cannot see it (no handle), the linked-SASS check must (L-SASS).
#define PL_COMPONENT rogue_bar
#include <pipelink.h>

PL_ENTRY(run) { asm volatile("bar.sync 9, 32;" ::: "memory"); }
