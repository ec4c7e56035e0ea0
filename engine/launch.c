/* Rank, size, local rank and coordinator address from the launcher. */
#include "engine/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "util/log.h"

/* One launcher's variables; NULL where it has none. */
typedef struct eng_launcher {
    const char *name;
    const char *rank, *size, *local_rank;
} eng_launcher_t;

static const eng_launcher_t eng_launchers[] = {
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"PMIx", "PMIX_RANK", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
};

/* A non-negative decimal int from the environment variable `var`; -1 when
 * unset, -2 (logged) when malformed. */
static int eng_env_int(const char *var)
{
    const char *s = var ? getenv(var) : NULL;
    if (!s)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < 0 || v > 1 << 24) {
        util_error("%s='%s' is not a rank or size (expected an integer in "
                   "[0, %d])",
                   var, s, 1 << 24);
        return -2;
    }
    return (int)v;
}

/* An explicit STRATA_* value wins; else the launcher's variable. */
static int eng_launch_field(const eng_config_t *cfg, eng_cfg_key_t key,
                            const char *var, const char **from_out)
{
    int64_t v = eng_config_int(cfg, key);
    if (v >= 0) {
        *from_out = eng_config_name(key);
        return (int)v;
    }
    *from_out = var;
    return eng_env_int(var);
}

static strata_status_t eng_launch_coord(const eng_config_t *cfg,
                                        eng_launch_t *l)
{
    const char *coord = eng_config_str(cfg, ENG_CFG_COORD);
    const char *file = eng_config_str(cfg, ENG_CFG_COORD_FILE);
    const char *maddr = getenv("MASTER_ADDR"), *mport = getenv("MASTER_PORT");
    if (*coord) {
        snprintf(l->coord, sizeof(l->coord), "%s", coord);
        return STRATA_OK;
    }
    if (*file) {
        if (strlen(file) >= sizeof(l->coord_file)) {
            util_error("STRATA_COORD_FILE is longer than %zu bytes",
                       sizeof(l->coord_file) - 1);
            return STRATA_ERR_CONFIG;
        }
        snprintf(l->coord_file, sizeof(l->coord_file), "%s", file);
        return STRATA_OK;
    }
    if (maddr && mport) {
        int port = eng_env_int("MASTER_PORT");
        if (port < 1 || port >= 65535 || !*maddr) {
            util_error("MASTER_ADDR='%s' MASTER_PORT='%s' do not give a "
                       "coordinator address (expected a host and a port in "
                       "[1, 65534]; Strata listens on MASTER_PORT+1)",
                       maddr, mport);
            return STRATA_ERR_CONFIG;
        }
        snprintf(l->coord, sizeof(l->coord), "%s:%d", maddr, port + 1);
        return STRATA_OK;
    }
    util_error("no coordinator address: set STRATA_COORD=host:port (a port "
               "rank 0 can listen on, on the host of rank 0), or "
               "STRATA_COORD_FILE=path on a filesystem every rank sees");
    return STRATA_ERR_CONFIG;
}

static strata_status_t eng_launch_check(const eng_launch_t *l,
                                        const char *rank_from,
                                        const char *size_from)
{
    if (l->rank < 0 || l->size < 0) {
        util_error("cannot tell this process's %s: no launcher environment "
                   "found (Open MPI, PMIx, Slurm or torchrun); set "
                   "STRATA_RANK and STRATA_SIZE, or start with strata-run",
                   l->rank < 0 ? "rank" : "number of processes");
        return STRATA_ERR_CONFIG;
    }
    if (l->rank >= l->size) {
        util_error("rank %d (from %s) is not below the size %d (from %s)",
                   l->rank, rank_from, l->size, size_from);
        return STRATA_ERR_CONFIG;
    }
    if (l->num_aggregators >= l->size) {
        util_error("STRATA_NUM_AGGREGATORS=%d leaves no worker among %d "
                   "processes (ranks 0..%d aggregate, the rest are workers)",
                   l->num_aggregators, l->size, l->num_aggregators - 1);
        return STRATA_ERR_CONFIG;
    }
    return STRATA_OK;
}

/* FNV-1a over the launcher's job id variables and the number of jobs this
 * process started before. */
static uint64_t eng_launch_incarnation(void)
{
    static const char *const vars[] = {
        "SLURM_JOB_ID",        "SLURM_STEP_ID",
        "PMIX_NAMESPACE",      "OMPI_MCA_ess_base_jobid",
        "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
    };
    static _Atomic uint64_t jobs;
    uint64_t h = 14695981039346656037ull;
    char buf[32];
    snprintf(buf, sizeof(buf), "#%llu", (unsigned long long)jobs++);
    for (size_t i = 0; i <= sizeof(vars) / sizeof(*vars); i++) {
        const char *v =
            i < sizeof(vars) / sizeof(*vars) ? getenv(vars[i]) : buf;
        for (const char *p = v ? v : ""; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ull;
        h = (h ^ ';') * 1099511628211ull;
    }
    return h;
}

/* STRATA_LAUNCHER_FD must be a socket this process holds; it is not
 * passed on to the programs the rank starts. */
static strata_status_t eng_launch_fd(const eng_config_t *cfg, int *fd_out)
{
    int fd = (int)eng_config_int(cfg, ENG_CFG_LAUNCHER_FD);
    struct stat sb;
    *fd_out = -1;
    if (fd < 0)
        return STRATA_OK;
    errno = 0;
    if (fstat(fd, &sb) != 0 || !S_ISSOCK(sb.st_mode)) {
        util_error("STRATA_LAUNCHER_FD=%d is not a socket this process holds "
                   "(%s): it is for launchers such as strata-run",
                   fd, errno ? strerror(errno) : "another kind of file");
        return STRATA_ERR_CONFIG;
    }
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    *fd_out = fd;
    return STRATA_OK;
}

void eng_launch_tell(const eng_launch_t *l, const char *fmt, ...)
{
    if (l->launcher_fd < 0)
        return;
    char line[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof(line) &&
        send(l->launcher_fd, line, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        util_debug("cannot tell the launcher '%s': %s", line, strerror(errno));
}

strata_status_t eng_launch_detect(const eng_config_t *cfg,
                                  eng_launch_t *launch_out)
{
    eng_launch_t l = {.rank = -1, .size = -1, .local_rank = -1};
    const eng_launcher_t *ln = NULL;
    for (size_t i = 0; i < sizeof(eng_launchers) / sizeof(*eng_launchers); i++)
        if (getenv(eng_launchers[i].rank)) {
            ln = &eng_launchers[i];
            break;
        }
    const char *rank_from = "", *size_from = "", *local_from = "";
    l.rank =
        eng_launch_field(cfg, ENG_CFG_RANK, ln ? ln->rank : NULL, &rank_from);
    l.size =
        eng_launch_field(cfg, ENG_CFG_SIZE, ln ? ln->size : NULL, &size_from);
    l.local_rank = eng_launch_field(cfg, ENG_CFG_LOCAL_RANK,
                                    ln ? ln->local_rank : NULL, &local_from);
    if (l.rank == -2 || l.size == -2 || l.local_rank == -2)
        return STRATA_ERR_CONFIG;
    l.launcher = eng_config_int(cfg, ENG_CFG_RANK) >= 0 ? "STRATA_RANK"
                 : ln                                   ? ln->name
                                                        : "none";
    l.num_aggregators = (int)eng_config_int(cfg, ENG_CFG_NUM_AGGREGATORS);
    strata_status_t st = eng_launch_check(&l, rank_from, size_from);
    if (st == STRATA_OK)
        st = eng_launch_coord(cfg, &l);
    if (st == STRATA_OK)
        st = eng_launch_fd(cfg, &l.launcher_fd);
    if (st != STRATA_OK)
        return st;
    l.incarnation = eng_launch_incarnation();
    *launch_out = l;
    return STRATA_OK;
}
