/*
 * rs_io.h -- the only place in rocketstore that makes file and memory-mapping system calls.
 *
 * Contract: every function returns 0 on success or -errno on failure and keeps no global
 * state. Callers own file descriptors and mappings; nothing here closes or unmaps on their
 * behalf except the function named for it. Safe to call without the GIL.
 */
#ifndef RS_IO_H
#define RS_IO_H

#include <stddef.h>
#include <stdint.h>

/* Open (creating when `create`) a file read-write, or read-only when `readonly`. */
int rs_open(const char *path, int create, int readonly, int *fd_out);
int rs_close(int fd);
/* Size of an open file in bytes. */
int rs_file_size(int fd, int64_t *size_out);
/* Allocate [0, size) for real (posix_fallocate), so writes through a mapping never SIGBUS on a
 * full disk: ENOSPC surfaces here, at creation, instead. Falls back to ftruncate + writing
 * zeros only where the filesystem does not support fallocate (EOPNOTSUPP). */
int rs_allocate(int fd, int64_t size);
int rs_truncate(int fd, int64_t size);
/* Allocate [offset, offset+len) for real (posix_fallocate) in a file that may be sparse. */
int rs_allocate_range(int fd, int64_t offset, int64_t len);

/* Map `size` bytes of `fd` shared; writable unless `readonly`. */
int rs_mmap(int fd, size_t size, int readonly, char **addr_out);
int rs_munmap(char *addr, size_t size);
/* advice: 0 normal, 1 random, 2 sequential, 3 willneed, 4 dontneed */
int rs_madvise(char *addr, size_t size, int advice);
int rs_mlock(char *addr, size_t size);
int rs_munlock(char *addr, size_t size);
/* msync(MS_SYNC) of [addr, addr+size); addr is rounded down to the page by the callee. */
int rs_msync(char *addr, size_t size);
int rs_fsync(int fd);
int rs_fdatasync(int fd);
/* fsync of a directory, so a created or renamed entry survives power loss. */
int rs_fsync_dir(const char *dir_path);
/* Write all of buf at offset (retrying short writes and EINTR). */
int rs_pwrite_all(int fd, const char *buf, size_t size, int64_t offset);

/* Fault [addr, addr+size) in writable without touching its bytes (MADV_POPULATE_WRITE, Linux
 * 5.14+; -EINVAL where unsupported), so it is safe beside a writer of the same pages. */
int rs_populate_write(char *addr, size_t size);

/* Page-aligned off-heap memory (posix_memalign) for the transient store pool; rs_free_aligned
 * releases it. */
int rs_alloc_aligned(size_t size, size_t align, char **out);
void rs_free_aligned(char *p);

/* Fault every page of [addr, addr+size) in: MADV_POPULATE_WRITE, or a zero byte per page when `write`
 * (a new, all-zero file: RocketMQ's warmMappedFile), else by reading one byte per page.
 * Returns a checksum of the bytes read so the loop is not optimised away. */
uint64_t rs_touch_pages(char *addr, size_t size, size_t page_size, int write);

#endif /* RS_IO_H */
