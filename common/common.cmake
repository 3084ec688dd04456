# pagoda_common: dtypes, HF config.json, safetensors weights, tokenizer.
add_library(pagoda_common STATIC
  ${CMAKE_CURRENT_LIST_DIR}/bpe_model.cc
  ${CMAKE_CURRENT_LIST_DIR}/byte_level.cc
  ${CMAKE_CURRENT_LIST_DIR}/hf_decoders.cc
  ${CMAKE_CURRENT_LIST_DIR}/hf_normalizers.cc
  ${CMAKE_CURRENT_LIST_DIR}/hf_pre_tokenizers.cc
  ${CMAKE_CURRENT_LIST_DIR}/hf_tokenizer.cc
  ${CMAKE_CURRENT_LIST_DIR}/utf8.cc
  ${CMAKE_CURRENT_LIST_DIR}/dtype.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_config.cc
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.cc
  ${CMAKE_CURRENT_LIST_DIR}/sentencepiece_adapter.cc
  ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_plan.cc
  ${CMAKE_CURRENT_LIST_DIR}/tensor_slice.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer.cc)
target_link_libraries(pagoda_common PUBLIC
  absl::status absl::statusor absl::strings absl::str_format absl::flat_hash_map
  nlohmann_json::nlohmann_json glog::glog ICU::uc ICU::i18n ${CMAKE_DL_LIBS})

# libsentencepiece embeds its own protobuf 3.14, which clashes with gRPC's
# libprotobuf 3.21 in one process; this shim is dlopen'ed with RTLD_DEEPBIND
# so sentencepiece keeps its copy to itself (see sentencepiece_adapter.h).
add_library(pagoda_sentencepiece_shim SHARED ${CMAKE_CURRENT_LIST_DIR}/sentencepiece_shim.cc)
target_link_libraries(pagoda_sentencepiece_shim PRIVATE PkgConfig::SENTENCEPIECE)
set_target_properties(pagoda_sentencepiece_shim PROPERTIES CXX_VISIBILITY_PRESET hidden)
add_dependencies(pagoda_common pagoda_sentencepiece_shim)
target_compile_definitions(pagoda_common PRIVATE
  PAGODA_SENTENCEPIECE_SHIM_PATH="$<TARGET_FILE:pagoda_sentencepiece_shim>")

# Test helpers shared by every module's tests: writes safetensors model dirs
# and random models (scripts/make_tiny_model.py).
add_library(pagoda_common_testing STATIC
  ${CMAKE_CURRENT_LIST_DIR}/testing/safetensors_writer.cc
  ${CMAKE_CURRENT_LIST_DIR}/testing/tiny_model.cc)
target_link_libraries(pagoda_common_testing PUBLIC pagoda_common absl::status absl::strings)

pagoda_add_test(common_dtype_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/dtype_test.cc
  LIBS pagoda_common)
pagoda_add_test(common_model_config_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_config_test.cc
  LIBS pagoda_common pagoda_common_testing)
pagoda_add_test(common_safetensors_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/safetensors_test.cc
  LIBS pagoda_common pagoda_common_testing)
pagoda_add_test(common_tensor_slice_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/tensor_slice_test.cc
  LIBS pagoda_common pagoda_common_testing)
pagoda_add_test(common_tensor_parallel_plan_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_plan_test.cc
  LIBS pagoda_common)
pagoda_add_test(common_tokenizer_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/tokenizer_test.cc
  LIBS pagoda_common pagoda_common_testing pagoda_proto)
# vLLM-style dashed flag names for every Pagoda executable.
add_library(pagoda_flags STATIC ${CMAKE_CURRENT_LIST_DIR}/flags.cc)
target_link_libraries(pagoda_flags PUBLIC absl::flags absl::flags_parse absl::flags_usage
  absl::flags_reflection absl::strings)
# --version reports what was really built.
target_compile_definitions(pagoda_flags PRIVATE PAGODA_VERSION="${PROJECT_VERSION}"
  PAGODA_BUILD_TYPE="$<IF:$<BOOL:${CMAKE_BUILD_TYPE}>,${CMAKE_BUILD_TYPE},default>")
pagoda_add_test(common_flags_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/flags_test.cc
  LIBS pagoda_flags)

# The secret that authenticates the server to its workers (both sides).
# Length-prefixed frames over a socket: the spawned worker's step channel.
add_library(pagoda_frame_channel STATIC ${CMAKE_CURRENT_LIST_DIR}/frame_channel.cc)
target_link_libraries(pagoda_frame_channel PUBLIC absl::status absl::strings absl::time)
pagoda_add_test(common_frame_channel_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/frame_channel_test.cc
  LIBS pagoda_frame_channel absl::time Threads::Threads)
add_library(pagoda_worker_secret STATIC ${CMAKE_CURRENT_LIST_DIR}/worker_secret.cc)
target_link_libraries(pagoda_worker_secret PUBLIC absl::status absl::statusor absl::strings)
pagoda_add_test(common_worker_secret_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker_secret_test.cc
  LIBS pagoda_worker_secret)

# TLS credentials from PEM files, for every gRPC server and client of Pagoda.
add_library(pagoda_tls STATIC ${CMAKE_CURRENT_LIST_DIR}/tls_credentials.cc)
target_link_libraries(pagoda_tls PUBLIC gRPC::grpc++ absl::status absl::statusor absl::strings)
pagoda_add_test(common_utf8_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/utf8_test.cc
  LIBS pagoda_common)
pagoda_add_test(common_hf_tokenizer_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/hf_tokenizer_test.cc
  LIBS pagoda_common)
target_compile_definitions(common_flags_test PRIVATE PAGODA_TEST_VERSION="${PROJECT_VERSION}"
  PAGODA_TEST_BUILD_TYPE="${CMAKE_BUILD_TYPE}")
