/* The copy kernels' parameters (lowering.ascend copies this block, less this comment, into each
 * package's tiling header; it needs <stdint.h>). */
// a strided view copied to another of the same shape (inputs gathered into a contiguous copy in the
// workspace, outputs scattered from one), for tensors whose elements do not fit the kernels' rows
#define FG_COPY_MAX_DIMS 8
struct FgCopyParams {
    uint32_t ndim, lines;                  // dimensions; lines = the product of all but the last
    uint32_t dims[FG_COPY_MAX_DIMS];
    int64_t src[FG_COPY_MAX_DIMS], dst[FG_COPY_MAX_DIMS];  // strides, in elements (never negative)
};
