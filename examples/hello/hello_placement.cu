// Stand-in for a linker-generated handle definition: the value hello.cu reads at link time.
extern "C" __device__ unsigned pl_hello_scale() { return 3u; }
