/* A libcuda.so.1 that is installed but exports no driver entry point: what
 * the CUDA runtime finds on a machine whose driver is broken or mismatched.
 * gpu_test_main_fails_on_a_broken_driver runs a GPU test binary against it,
 * which must fail instead of reporting Skipped. */
int pagoda_broken_libcuda_marker(void) { return 0; }
