# Included by ctest (TEST_INCLUDE_FILES, tests/CMakeLists.txt) in an
# AddressSanitizer build: every test, and every process it starts (ranks
# under mpirun, strata-run, the launch scripts), leaves Open MPI's leaks at
# exit to lsan.supp. Options already in LSAN_OPTIONS come last and win.
set(ENV{LSAN_OPTIONS}
    "suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan.supp:print_suppressions=0:$ENV{LSAN_OPTIONS}")
