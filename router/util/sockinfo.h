/* What the kernel knows of a TCP connection (sockinfo.c). */
#ifndef PDR_SOCKINFO_H
#define PDR_SOCKINFO_H

#include <stdint.h>

/* The bytes sent on TCP socket fd that the peer acknowledged so far (TCP_INFO tcpi_bytes_acked, Linux
 * 4.1 and later): what a client has taken of a response, whole sends or not. 0, or PDR_ENOTSUP when the
 * kernel does not tell (not TCP, or too old), or PDR_EIO. */
int pdr_sock_bytes_acked(int fd, uint64_t *out);

#endif
