/* The thread team fusedgrad's CPU kernels run their parallel regions on.
 *
 * A compiled CPU library calls its parallel launcher and barrier through two
 * pointers its loader fills (__TVMBackendParallelLaunch,
 * __TVMBackendParallelBarrier); fusedgrad.team points them here.  Both run on
 * the process's OpenMP runtime: this file is built with -fopenmp against
 * libgomp.so.1, the soname torch's CPU build loads too, so in a process that
 * runs torch there is one OpenMP runtime and one pool of threads, torch's, and
 * the team is torch's intra-op team (its size follows torch.set_num_threads).
 * Without torch the same runtime serves fusedgrad alone.
 *
 * Why not the loader's own launcher: its idle workers and its barrier wait by
 * calling sched_yield in a loop, which hands the core to any other runnable
 * process (a data loader, a compile) for a whole time slice at every barrier of
 * every step, and its workers spin beside torch's.  OpenMP's barrier spins
 * with a pause for a bounded time and then sleeps on a futex, and its idle
 * threads are the ones torch's own parallel ops use.
 *
 * The contract (tvm/runtime/c_backend_api.h): launch(f, cdata, n) runs
 * f(task_id, penv, cdata) for task_id 0..n-1 on n threads at once (n = 0: the
 * whole team) and returns when all have returned, nonzero if any did;
 * barrier(task_id, penv) waits for all n of them.  The kernels read the team
 * size from penv->num_task, so any size gives the same bits.
 */
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct {
    void *sync_handle;
    int32_t num_task;
} TVMParallelGroupEnv;

typedef int (*FTVMParallelLambda)(int task_id, TVMParallelGroupEnv *penv, void *cdata);

#define FG_TEAM_MAX 1024

/* what the calling thread's last launch did, for tests: the team's size and
 * each member's kernel thread id (tid); and how many launches it made */
static _Thread_local int last_team_size;
static _Thread_local long last_team_tids[FG_TEAM_MAX];
static _Thread_local long launches;
static _Thread_local long my_tid; /* this thread's kernel thread id, read once */

static long tid(void) { return my_tid ? my_tid : (my_tid = (long)syscall(SYS_gettid)); }

/* In a child forked from this process the OpenMP runtime's pool is gone but
 * its bookkeeping is not: a parallel region there waits forever on threads
 * that were not forked.  Such a child runs every launch as a team of one, as
 * torch's data-loader workers do (torch.set_num_threads(1)). */
static volatile int forked_child;
static void on_fork_child(void) { forked_child = 1; my_tid = 0; /* the child's thread has its own id */ }
__attribute__((constructor)) static void watch_forks(void) { pthread_atfork(NULL, NULL, on_fork_child); }

static int run_alone(FTVMParallelLambda f, void *cdata, int num_task) {
    TVMParallelGroupEnv env = {0, 1};
    if (num_task > 1) return -1; /* a kernel that needs several tasks at once cannot run alone */
    last_team_size = 1;
    last_team_tids[0] = tid();
    launches++;
    return f(0, &env, cdata) != 0 ? -1 : 0;
}

int fg_team_launch(FTVMParallelLambda f, void *cdata, int num_task) {
    if (forked_child) return run_alone(f, cdata, num_task);
    int failed = 0, short_team = 0;
    int want = num_task > 0 ? num_task : omp_get_max_threads();
    TVMParallelGroupEnv env = {0, 0};
    long *tids = last_team_tids; /* the launching thread's, written by every member */
    int team_size = 0;
    if (want < 1) want = 1;
#pragma omp parallel num_threads(want) shared(failed, short_team, env, tids, team_size)
    {
        int id = omp_get_thread_num(), n = omp_get_num_threads();
#pragma omp single
        {
            /* a team smaller than asked (nested, a thread limit): with num_task
             * 0 the kernel deals its work over the team it gets; a kernel that
             * asked for a fixed number of tasks cannot run on fewer */
            env.num_task = n;
            short_team = num_task > 0 && n != num_task;
            team_size = n;
        } /* implied barrier: env is set for all */
        if (id < FG_TEAM_MAX) tids[id] = tid();
        if (!short_team && f(id, &env, cdata) != 0) {
#pragma omp atomic write
            failed = 1;
        }
    }
    last_team_size = team_size;
    launches++;
    return failed || short_team ? -1 : 0;
}

int fg_team_barrier(int task_id, TVMParallelGroupEnv *penv) {
    (void)task_id;
    (void)penv;
#pragma omp barrier
    return 0;
}

int fg_team_last(long *tids, int cap) {
    int n = last_team_size < cap ? last_team_size : cap;
    for (int i = 0; i < n && i < FG_TEAM_MAX; i++) tids[i] = last_team_tids[i];
    return last_team_size;
}

long fg_team_launches(void) { return launches; }
