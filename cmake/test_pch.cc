// The source of pagoda_test_pch (cmake/PagodaTest.cmake): an object library
// needs one; the precompiled header is what it exists for.
