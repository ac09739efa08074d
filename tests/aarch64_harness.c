/*
 * Runs one entry point of a fusedgrad CPU library without the TVM runtime, so that a library built
 * for another architecture (aarch64) can be checked under qemu-user on this machine.
 *
 *   aarch64_harness LIBRARY SYMBOL ARGS [TASKS]
 *
 * LIBRARY is dlopen()ed and SYMBOL (the manifest's kernel symbol, e.g. fg_column_sum_float32) is
 * called through its tvm-ffi entry __tvm_ffi_<SYMBOL>:
 *   int (void* self, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result)   (tvm/ffi/c_api.h)
 * ARGS holds one line per argument, in the kernel's order (tests/test_aarch64_qemu.py writes it):
 *   tensor CODE BITS NDIM SHAPE... STRIDES... in|out PATH   a DLTensor on the CPU (DLPack code/bits)
 *   float VALUE                                             a float scalar
 *   int VALUE                                               an integer scalar
 * An input's file holds every element the strides reach (1 + sum((shape-1)*stride) of them); an
 * output's buffer starts as all-ones bytes (NaN for floats) and is written to PATH after the call.
 *
 * The library's context slots (what TVM's runtime fills in when it loads a library,
 * src/ffi/extra/library_module.cc) are filled with this file's functions: a parallel launch that runs
 * the tasks one after another in task order (TASKS tasks, default 1, when the kernel asks for "all
 * threads"), a barrier (only meaningful for one task: with several serial tasks it is an error),
 * malloc-based workspaces, and the error setter the library calls directly (this executable exports
 * it: link with -rdynamic).  A slot this file does not provide is an error naming it.
 *
 * Exit status: 0 the kernel returned 0; 1 the kernel reported an error (printed); 2 bad usage, a
 * file or library problem.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tvm/ffi/c_api.h>
#include <tvm/runtime/c_backend_api.h>

#define MAX_ARGS 32
#define ALIGN 64 /* kAllocAlignment and kTempAllocaAlignment of tvm/runtime/device_api.h */

static int g_tasks = 1;
static int g_errors = 0;

static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("aarch64_harness: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

static void* aligned(size_t nbytes) {
  size_t n = (nbytes + ALIGN - 1) / ALIGN * ALIGN;
  void* p = aligned_alloc(ALIGN, n ? n : ALIGN);
  if (!p) die("out of memory (%zu bytes)", nbytes);
  return p;
}

/* ---- what the TVM runtime provides to a loaded library ------------------------------------ */

int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void* cdata, int num_task) {
  int n = num_task > 0 ? num_task : g_tasks;
  for (int task = 0; task < n; ++task) {
    TVMParallelGroupEnv env = {NULL, n};
    int rc = flambda(task, &env, cdata);
    if (rc != 0) return rc;
  }
  return 0;
}

int TVMBackendParallelBarrier(int task_id, TVMParallelGroupEnv* penv) {
  if (penv->num_task > 1) {
    fprintf(stderr, "kernel error: a barrier in task %d of %d cannot be honoured when tasks run one after "
                    "another\n", task_id, (int)penv->num_task);
    g_errors++;
    return -1;
  }
  return 0;
}

void* TVMBackendAllocWorkspace(int device_type, int device_id, uint64_t nbytes, int dtype_code_hint,
                               int dtype_bits_hint) {
  (void)device_type, (void)device_id, (void)dtype_code_hint, (void)dtype_bits_hint;
  return aligned((size_t)nbytes);
}

int TVMBackendFreeWorkspace(int device_type, int device_id, void* ptr) {
  (void)device_type, (void)device_id;
  free(ptr);
  return 0;
}

void TVMFFIErrorSetRaisedFromCStr(const char* kind, const char* message) {
  fprintf(stderr, "kernel error: %s: %s\n", kind, message);
  g_errors++;
}

void TVMFFIErrorSetRaisedFromCStrParts(const char* kind, const char** message_parts, int32_t num_parts) {
  fprintf(stderr, "kernel error: %s: ", kind);
  for (int32_t i = 0; i < num_parts; ++i) fputs(message_parts[i], stderr);
  fputc('\n', stderr);
  g_errors++;
}

typedef int (*ParallelLaunch)(FTVMParallelLambda, void*, int);
typedef int (*ParallelBarrier)(int, TVMParallelGroupEnv*);
typedef void* (*AllocWorkspace)(int, int, uint64_t, int, int);
typedef int (*FreeWorkspace)(int, int, void*);
typedef void (*ErrorSetRaised)(const char*, const char*);

static void fill_context_slots(void* lib) {
  /* the slots TVM's runtime registers (TVMFFIEnvModRegisterContextSymbol) that this file provides */
  void** slot;
  if ((slot = dlsym(lib, "__TVMBackendParallelLaunch"))) *(ParallelLaunch*)slot = TVMBackendParallelLaunch;
  if ((slot = dlsym(lib, "__TVMBackendParallelBarrier"))) *(ParallelBarrier*)slot = TVMBackendParallelBarrier;
  if ((slot = dlsym(lib, "__TVMBackendAllocWorkspace"))) *(AllocWorkspace*)slot = TVMBackendAllocWorkspace;
  if ((slot = dlsym(lib, "__TVMBackendFreeWorkspace"))) *(FreeWorkspace*)slot = TVMBackendFreeWorkspace;
  if ((slot = dlsym(lib, "__TVMFFIErrorSetRaisedFromCStr"))) *(ErrorSetRaised*)slot = TVMFFIErrorSetRaisedFromCStr;
  /* and those it does not: calls into other functions or modules */
  static const char* missing[] = {"__TVMFFIFunctionCall", "__TVMFFIHandleInitOnce",
                                  "__TVMFFIEnvModLookupFromImports", "__TVMBackendGetFuncFromEnv"};
  for (size_t i = 0; i < sizeof missing / sizeof *missing; ++i)
    if (dlsym(lib, missing[i])) die("the library needs %s, which this harness does not provide", missing[i]);
}

/* ---- arguments ------------------------------------------------------------------------------ */

typedef struct {
  DLTensor t;
  int64_t shape[8], strides[8];
  size_t nbytes;
  int is_output;
  char path[4096];
} Tensor;

static size_t extent_bytes(const Tensor* a) {
  int64_t last = 0;
  for (int i = 0; i < a->t.ndim; ++i) {
    if (a->shape[i] == 0) return 0;
    last += (a->shape[i] - 1) * a->strides[i];
  }
  return (size_t)(last + 1) * ((a->t.dtype.bits + 7) / 8);
}

static void read_tensor(Tensor* a) {
  FILE* f = fopen(a->path, "rb");
  if (!f) die("cannot open input %s", a->path);
  size_t got = fread(a->t.data, 1, a->nbytes, f);
  int extra = fgetc(f);
  fclose(f);
  if (got != a->nbytes || extra != EOF) die("%s: expected exactly %zu bytes", a->path, a->nbytes);
}

static void write_tensor(const Tensor* a) {
  FILE* f = fopen(a->path, "wb");
  if (!f || fwrite(a->t.data, 1, a->nbytes, f) != a->nbytes || fclose(f) != 0) die("cannot write %s", a->path);
}

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) die("usage: %s LIBRARY SYMBOL ARGS [TASKS]", argv[0]);
  if (argc == 5 && (g_tasks = atoi(argv[4])) < 1) die("TASKS: expected a positive count, got %s", argv[4]);

  static Tensor tensors[MAX_ARGS];
  TVMFFIAny args[MAX_ARGS];
  int nargs = 0;
  FILE* desc = fopen(argv[3], "r");
  if (!desc) die("cannot open %s", argv[3]);
  char kind[16];
  while (fscanf(desc, "%15s", kind) == 1) {
    if (nargs == MAX_ARGS) die("%s: more than %d arguments", argv[3], MAX_ARGS);
    TVMFFIAny* any = &args[nargs];
    memset(any, 0, sizeof *any);
    if (strcmp(kind, "float") == 0) {
      any->type_index = kTVMFFIFloat;
      if (fscanf(desc, "%lf", &any->v_float64) != 1) die("%s: argument %d: bad float", argv[3], nargs);
    } else if (strcmp(kind, "int") == 0) {
      any->type_index = kTVMFFIInt;
      if (fscanf(desc, "%lld", (long long*)&any->v_int64) != 1) die("%s: argument %d: bad int", argv[3], nargs);
    } else if (strcmp(kind, "tensor") == 0) {
      Tensor* a = &tensors[nargs];
      unsigned code, bits;
      int ndim;
      char role[8];
      if (fscanf(desc, "%u %u %d", &code, &bits, &ndim) != 3 || ndim < 0 || ndim > 8)
        die("%s: argument %d: bad dtype or rank", argv[3], nargs);
      for (int i = 0; i < ndim; ++i)
        if (fscanf(desc, "%lld", (long long*)&a->shape[i]) != 1) die("%s: argument %d: bad shape", argv[3], nargs);
      for (int i = 0; i < ndim; ++i)
        if (fscanf(desc, "%lld", (long long*)&a->strides[i]) != 1) die("%s: argument %d: bad strides", argv[3], nargs);
      if (fscanf(desc, "%7s %4095s", role, a->path) != 2 || (strcmp(role, "in") && strcmp(role, "out")))
        die("%s: argument %d: expected in|out PATH", argv[3], nargs);
      a->is_output = strcmp(role, "out") == 0;
      a->t.device.device_type = kDLCPU;
      a->t.device.device_id = 0;
      a->t.ndim = ndim;
      a->t.dtype.code = (uint8_t)code;
      a->t.dtype.bits = (uint8_t)bits;
      a->t.dtype.lanes = 1;
      a->t.shape = a->shape;
      a->t.strides = a->strides;
      a->t.byte_offset = 0;
      a->nbytes = extent_bytes(a);
      a->t.data = aligned(a->nbytes);
      if (a->is_output)
        memset(a->t.data, 0xff, a->nbytes);
      else
        read_tensor(a);
      any->type_index = kTVMFFIDLTensorPtr;
      any->v_ptr = &a->t;
    } else {
      die("%s: argument %d: unknown kind %s (tensor, float, int)", argv[3], nargs, kind);
    }
    nargs++;
  }
  fclose(desc);

  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) die("dlopen %s: %s", argv[1], dlerror());
  fill_context_slots(lib);
  char entry[512];
  snprintf(entry, sizeof entry, "__tvm_ffi_%s", argv[2]);
  TVMFFISafeCallType func = (TVMFFISafeCallType)dlsym(lib, entry);
  if (!func) die("%s: no symbol %s", argv[1], entry);

  TVMFFIAny result;
  memset(&result, 0, sizeof result);
  result.type_index = kTVMFFINone;
  int rc = func(NULL, args, nargs, &result);
  if (rc != 0 || g_errors) {
    fprintf(stderr, "aarch64_harness: %s returned %d\n", entry, rc);
    return 1;
  }
  for (int i = 0; i < nargs; ++i)
    if (args[i].type_index == kTVMFFIDLTensorPtr && tensors[i].is_output) write_tensor(&tensors[i]);
  return 0;
}
