/* rs_io.c -- see rs_io.h for the contract. */
#define _GNU_SOURCE
#include "rs_io.h"

#include <errno.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int rs_open(const char *path, int create, int readonly, int *fd_out)
{
    int flags = readonly ? O_RDONLY : O_RDWR;
    if (create && !readonly) flags |= O_CREAT;
    int fd;
    do {
        fd = open(path, flags | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return -errno;
    *fd_out = fd;
    return 0;
}

int rs_close(int fd)
{
    /* close is not retried on EINTR: on Linux the descriptor is gone either way */
    return close(fd) == 0 ? 0 : -errno;
}

int rs_file_size(int fd, int64_t *size_out)
{
    struct stat st;
    if (fstat(fd, &st) != 0) return -errno;
    *size_out = (int64_t)st.st_size;
    return 0;
}

int rs_truncate(int fd, int64_t size)
{
    int rc;
    do {
        rc = ftruncate(fd, (off_t)size);
    } while (rc != 0 && errno == EINTR);
    return rc == 0 ? 0 : -errno;
}

int rs_allocate(int fd, int64_t size)
{
    int rc = posix_fallocate(fd, 0, (off_t)size);   /* returns the error, not -1/errno */
    if (rc == 0) return 0;
    if (rc != EOPNOTSUPP && rc != EINVAL) return -rc;
    /* no fallocate here (e.g. some network filesystems): write zeros so blocks exist */
    rc = rs_truncate(fd, 0);
    if (rc != 0) return rc;
    static const char zeros[65536];
    int64_t done = 0;
    while (done < size) {
        size_t n = (size - done) < (int64_t)sizeof(zeros) ? (size_t)(size - done) : sizeof(zeros);
        rc = rs_pwrite_all(fd, zeros, n, done);
        if (rc != 0) return rc;
        done += (int64_t)n;
    }
    return 0;
}

int rs_allocate_range(int fd, int64_t offset, int64_t len)
{
    int rc = posix_fallocate(fd, (off_t)offset, (off_t)len);
    if (rc == 0) return 0;
    if (rc != EOPNOTSUPP && rc != EINVAL) return -rc;
    /* no fallocate: write the zeros ourselves, so the blocks exist before any mapping use */
    static const char zeros[65536];
    int64_t done = 0;
    while (done < len) {
        size_t n = (len - done) < (int64_t)sizeof(zeros) ? (size_t)(len - done) : sizeof(zeros);
        rc = rs_pwrite_all(fd, zeros, n, offset + done);
        if (rc != 0) return rc;
        done += (int64_t)n;
    }
    return 0;
}

int rs_mmap(int fd, size_t size, int readonly, char **addr_out)
{
    int prot = readonly ? PROT_READ : (PROT_READ | PROT_WRITE);
    void *p = mmap(NULL, size, prot, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return -errno;
    *addr_out = (char *)p;
    return 0;
}

int rs_munmap(char *addr, size_t size)
{
    return munmap(addr, size) == 0 ? 0 : -errno;
}

int rs_madvise(char *addr, size_t size, int advice)
{
    static const int table[] = {MADV_NORMAL, MADV_RANDOM, MADV_SEQUENTIAL, MADV_WILLNEED,
                                MADV_DONTNEED};
    if (advice < 0 || advice > 4) return -EINVAL;
    return madvise(addr, size, table[advice]) == 0 ? 0 : -errno;
}

int rs_mlock(char *addr, size_t size)
{
    return mlock(addr, size) == 0 ? 0 : -errno;
}

int rs_munlock(char *addr, size_t size)
{
    return munlock(addr, size) == 0 ? 0 : -errno;
}

int rs_msync(char *addr, size_t size)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)addr & ~((uintptr_t)page - 1);
    size_t len = size + (size_t)((uintptr_t)addr - start);
    if (len == 0) return 0;
    return msync((void *)start, len, MS_SYNC) == 0 ? 0 : -errno;
}

int rs_fsync(int fd)
{
    return fsync(fd) == 0 ? 0 : -errno;
}

int rs_fdatasync(int fd)
{
    return fdatasync(fd) == 0 ? 0 : -errno;
}

int rs_fsync_dir(const char *dir_path)
{
    int fd = open(dir_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int rc = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

int rs_pwrite_all(int fd, const char *buf, size_t size, int64_t offset)
{
    while (size > 0) {
        ssize_t n = pwrite(fd, buf, size, (off_t)offset);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) return -EIO;
        buf += n;
        size -= (size_t)n;
        offset += n;
    }
    return 0;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

uint64_t rs_touch_pages(char *addr, size_t size, size_t page_size, int write)
{
    uint64_t sum = 0;
    /* Linux 5.14+: fault every page in writable with one call (no per-page trap) */
    if (write && madvise(addr, size, MADV_POPULATE_WRITE) == 0)
        return 0;
    volatile char *p = addr;
    for (size_t i = 0; i < size; i += page_size) {
        if (write)
            p[i] = 0;
        else
            sum += (unsigned char)p[i];
    }
    return sum;
}

int rs_populate_write(char *addr, size_t size)
{
#ifdef MADV_POPULATE_WRITE
    return madvise(addr, size, MADV_POPULATE_WRITE) == 0 ? 0 : -errno;
#else
    (void)addr; (void)size;
    return -EINVAL;
#endif
}

int rs_alloc_aligned(size_t size, size_t align, char **out)
{
    void *p = NULL;
    int rc = posix_memalign(&p, align, size);
    if (rc != 0) return -rc;
    *out = (char *)p;
    return 0;
}

void rs_free_aligned(char *p)
{
    free(p);
}
