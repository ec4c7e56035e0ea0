/*
 * Promela model of Strata's staleness tracker (engine/tracker.c) and of its
 * parking (util/waitq.c), checked by spin.
 *
 * Each statement that touches shared state is one atomic operation of the C
 * code: a load or store of a 64-bit word, a CAS (its retry loop collapses to
 * one conditional update), a fetch_add. Local computation is folded into the
 * step of the load it follows. Spin interleaves them under sequential
 * consistency, which the C code obtains by using seq_cst atomics throughout
 * the protocol.
 *
 * Workers 0 and 1 form group 0, worker 2 group 1. Each worker loops: wait
 * until the rule serves the pull for clock c (parking on the futex word when
 * it does not hold), then have its update applied (its clock advances and the
 * minima are republished). Options: WAITERS (workers that wait for pulls;
 * the others only advance), MAXC (clocks per worker), SIN and SOUT (the
 * staleness bounds), MOVE (worker 1 moves to group 1 after its first clock,
 * at that group's clock or the minimum), DROP (worker 2 dies after its first
 * clock).
 *
 * Checked:
 *  - in every reachable state the published group clocks and minimum are no
 *    greater than the true ones (asserted by every step that writes a worker
 *    word or a published word, the only steps that can break it);
 *  - every served pull satisfies the rule against the true clocks;
 *  - no wake-up is lost: a worker parked for good while the others finished
 *    is an invalid end state, which spin reports;
 *  - once everyone finished, the published clocks equal the true ones.
 */

#ifndef MAXC
#define MAXC 2 /* clocks each worker completes */
#endif
#ifndef SIN
#define SIN 0 /* intra-group staleness */
#endif
#ifndef SOUT
#define SOUT 1 /* inter-group staleness */
#endif

#ifndef WAITERS
#define WAITERS 3 /* workers 0..WAITERS-1 wait for their pulls */
#endif

#define N 3
#define G 2
#define INF 255 /* clock of a dropped worker; minimum over nobody */

/* Worker words: group and clock change together (one 64-bit word). */
byte leaf_grp[N];
byte leaf_clk[N];
/* Published words: generation and value (one 64-bit word each). */
byte gw_gen[G];
byte gw_val[G];
byte root_gen;
byte root_val;
/* The wait queue: futex word, parked count, who sleeps in the kernel. */
byte seq;
byte waiters;
bool sleeping[8];
byte finished;

/* ---- the truth, for the checks ---- */

inline true_min(g, m) {
    m = INF;
    j = 0;
    do
    :: j < N ->
        if
        :: (g == 255 || leaf_grp[j] == g) && leaf_clk[j] < m -> m = leaf_clk[j]
        :: else -> skip
        fi;
        j++
    :: else -> break
    od;
    j = 0
}

/* Published values are lower bounds of the true ones. They change only in
 * the steps that write a worker word or a published word, and each of those
 * checks this, so it holds in every reachable state. */
inline invariant() {
    k = 0;
    do
    :: k < G ->
        true_min(k, tm);
        assert(tm == INF || gw_val[k] <= tm);
        k++
    :: else -> break
    od;
    true_min(255, tm);
    assert(root_val <= tm);
    k = 0; tm = 0
}

/* ---- util/waitq.c ---- */

inline wake() {
    seq++; /* atomic_fetch_add(&q->seq, 1) */
    if
    :: waiters > 0 -> /* futex_wake(all) */
        d_step {
            k = 0;
            do
            :: k < 8 -> sleeping[k] = false; k++
            :: else -> break
            od;
            k = 0
        }
    :: else -> skip
    fi
}

/* ---- engine/tracker.c: trk_scan, trk_publish, trk_update ---- */

inline scan(g0, g1, skipw) {
    i = 0;
    m0 = INF; m1 = INF; all = INF;
    seen0 = false; seen1 = false; live0 = false;
    do
    :: i < N ->
        d_step { /* one load of the worker's word, then local work */
            lg = leaf_grp[i];
            lc = leaf_clk[i];
            if :: lc < all -> all = lc :: else -> skip fi;
            if
            :: lg == g0 && i != skipw ->
                seen0 = true;
                if :: lc != INF -> live0 = true :: else -> skip fi;
                if :: lc < m0 -> m0 = lc :: else -> skip fi
            :: else -> skip
            fi;
            if
            :: lg == g1 && i != skipw ->
                seen1 = true;
                if :: lc < m1 -> m1 = lc :: else -> skip fi
            :: else -> skip
            fi;
            i++
        }
    :: else -> break
    od;
    i = 0
}

inline update(g0, g1) {
#ifdef MOVE
    /* Only moves change generations: without them these loads are no-ops. */
    gen0 = gw_gen[g0];
    gen1 = gw_gen[g1];
    rgen = root_gen;
#endif
    scan(g0, g1, 255);
    raised = false;
    d_step { /* trk_publish: CAS-max unless the generation moved on */
        if
        :: seen0 && gen0 % 2 == 0 && gw_gen[g0] == gen0 && gw_val[g0] < m0 ->
            gw_val[g0] = m0; raised = true
        :: else -> skip
        fi;
        invariant()
    }
    d_step {
        if
        :: seen1 && gen1 % 2 == 0 && gw_gen[g1] == gen1 && gw_val[g1] < m1 ->
            gw_val[g1] = m1; raised = true
        :: else -> skip
        fi;
        invariant()
    }
    d_step {
        if
        :: rgen % 2 == 0 && root_gen == rgen && root_val < all ->
            root_val = all; raised = true
        :: else -> skip
        fi;
        invariant();
        /* locals are dead from here: forget them */
        m0 = 0; m1 = 0; all = 0; seen0 = false; seen1 = false; live0 = false;
        gen0 = 0; gen1 = 0; rgen = 0; lg = 0; lc = 0
    };
    if
    :: raised -> raised = false; wake()
    :: else -> skip
    fi
}

/* eng_tracker_advance_worker: a CAS of the worker's word, then update. */
inline advance(w, c) {
    d_step { g = leaf_grp[w]; leaf_clk[w] = c; invariant() };
    update(g, g);
    g = 0
}

/* eng_tracker_drop_worker */
inline drop(w) {
    d_step { g = leaf_grp[w]; leaf_clk[w] = INF; invariant() };
    update(g, g);
    g = 0;
    wake()
}

/* eng_tracker_move_worker(w, h, clock = max(clock(h), minimum)) */
inline move(w, h) {
    atomic { root_gen % 2 == 0 -> root_gen++; rv = root_val };  /* begin */
    atomic { gw_gen[h] % 2 == 0 -> gw_gen[h]++; gv = gw_val[h] };
    scan(h, h, w);
    if :: gv > rv -> x = gv :: else -> x = rv fi;
    /* checks of trk_check_move hold by the choice of x */
    assert(x >= rv && (!live0 || x >= gv));
    d_step { og = leaf_grp[w]; leaf_grp[w] = h; leaf_clk[w] = x; invariant() };
    if
    :: live0 -> gw_gen[h]++
    :: else -> d_step { gw_gen[h]++; gw_val[h] = x; invariant() } /* empty */
    fi;
    root_gen++;                                          /* end */
    d_step { rv = 0; gv = 0 };
    update(og, h);
    c = x;
    d_step { x = 0; og = 0 }
}

/* eng_tracker_wait_pull, with the rule checked against the truth. */
inline wait_pull(w, c) {
    waiters++;
    do
    :: s = seq;
       d_step { wg = leaf_grp[w]; wc = leaf_clk[w] };
       pg = gw_val[wg];
       d_step {
           pr = root_val;
           ok = pg + SIN >= c && pr + SOUT >= c;
           if
           :: ok -> /* served: the true clocks obey the rule */
               true_min(wg, tm);
               assert(tm + SIN >= c);
               true_min(255, tm);
               assert(tm + SOUT >= c)
           :: else -> skip
           fi;
           s2 = s; s = 0; wg = 0; wc = 0; pg = 0; pr = 0; tm = 0
       };
       if
       :: ok -> ok = false; break
       :: else ->
           atomic { /* futex_wait(&seq, s): sleep only on an unchanged word */
               if
               :: seq == s2 -> sleeping[_pid] = true
               :: else -> skip
               fi;
               s2 = 0
           };
           !sleeping[_pid]
       fi
    od;
    waiters--
}

proctype worker(byte w) {
    byte c, g, og, h, x, s, s2, wg, wc, pg, pr, rv, gv, tm;
    byte i, j, k, lg, lc, m0, m1, all, gen0, gen1, rgen;
    bool seen0, seen1, live0, raised, ok, moved;
    c = 0;
    do
    :: c < MAXC ->
        if
        :: w < WAITERS -> wait_pull(w, c)
        :: else -> skip /* an update that needs no pull: only advances */
        fi;
        c++;
        advance(w, c);
#ifdef MOVE
        if
        :: w == 1 && c == 1 && !moved -> moved = true; h = 1; move(w, h); h = 0
        :: else -> skip
        fi;
#endif
#ifdef DROP
        if
        :: w == 2 && c == 1 -> drop(w); break
        :: else -> skip
        fi;
#endif
    :: else -> break
    od;
    finished++
}

/* At the end: the published clocks caught up with the true ones. */
active proctype quiescence() {
    byte j, m, g;
    finished == N;
    d_step {
        g = 0;
        do
        :: g < G ->
            true_min(g, m);
            assert(m == INF || gw_val[g] == m);
            g++
        :: else -> break
        od;
        true_min(255, m);
        assert(root_val == m)
    }
}

init {
    leaf_grp[0] = 0;
    leaf_grp[1] = 0;
    leaf_grp[2] = 1;
    atomic {
        run worker(0);
        run worker(1);
        run worker(2)
    }
}
