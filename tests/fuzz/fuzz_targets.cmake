# Fuzz targets of the modules (see CMakeLists.txt beside this file).
strata_add_fuzz_target(NAME fuzz_tcp_header SOURCES fuzz_tcp_header.c)
strata_add_fuzz_target(NAME fuzz_shm_ring SOURCES fuzz_shm_ring.c)
strata_add_fuzz_target(NAME fuzz_auth SOURCES fuzz_auth.c)
# The engine's messages from connections that are no member of the job.
strata_add_fuzz_target(NAME fuzz_engine_stray SOURCES fuzz_engine_stray.c
                       ${PROJECT_SOURCE_DIR}/tests/unit/engine/fake_tp.c)
# A layout as a member sends it (LAYOUT, TENSORS).
strata_add_fuzz_target(NAME fuzz_engine_layout SOURCES fuzz_engine_layout.c)
# The messages of a member of the job after its handshake: a whole job per
# input, so 50 mutations a seed (about 1,000 jobs: seconds under ASan).
strata_add_fuzz_target(NAME fuzz_engine_member SOURCES fuzz_engine_member.c
                       ${PROJECT_SOURCE_DIR}/tests/unit/engine/fake_tp.c
                       MUTATIONS 50)
