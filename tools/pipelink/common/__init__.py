"""The ground both halves of pipelink stand on: diagnostics (coded errors), the expression
language of contracts and manifests, careful file reading, and the manifest's schema (the one
interface between the linker, which writes manifests, and the runtime, which reads them)."""
