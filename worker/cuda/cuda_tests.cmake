# GPU tests of the CUDA worker (included by cuda.cmake when nvcc was found):
# GPU-vs-CPU logits and graphs-vs-eager. Both skip by exit code without a
# device (pagoda_add_test GPU).
pagoda_add_test(worker_cuda_model_test
  SOURCES ${PAGODA_WORKER_CUDA_DIR}/cuda_model_test.cc
  LIBS pagoda_worker_cuda
  GPU)
pagoda_add_test(worker_cuda_graph_test
  SOURCES ${PAGODA_WORKER_CUDA_DIR}/cuda_graph_test.cc
  LIBS pagoda_worker_cuda
  GPU)
set_tests_properties(worker_cuda_model_test worker_cuda_graph_test PROPERTIES TIMEOUT 240)
