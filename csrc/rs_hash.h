/*
 * rs_hash.h -- the hashes RocketMQ's files depend on.
 *
 * rs_java_hash: Java String.hashCode (h = 31*h + c over UTF-16 code units) of a UTF-8
 * string, so tags codes and index key hashes equal a Java broker's for any text: code
 * points above U+FFFF contribute their surrogate pair. Input must be valid UTF-8 (Python's
 * str.encode guarantees it); an invalid byte is hashed as U+FFFD, as Java's decoder would.
 *
 * rs_crc32: zlib's CRC-32 (IEEE, as java.util.zip.CRC32) of any length; the commit log
 * stores it masked with & 0x7FFFFFFF (rs_body_crc).
 */
#ifndef RS_HASH_H
#define RS_HASH_H

#include <stddef.h>
#include <stdint.h>

int32_t rs_java_hash(const char *utf8, size_t len);
/* continue a Java hash over more UTF-8 text (for hashing "topic#key" without concatenating) */
int32_t rs_java_hash_update(int32_t h, const char *utf8, size_t len);
uint32_t rs_crc32(uint32_t crc, const unsigned char *buf, size_t len);
int32_t rs_body_crc(const unsigned char *buf, size_t len);

#endif /* RS_HASH_H */
