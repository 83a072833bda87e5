/*
 * File descriptors between processes of one host, for CUDA VMM sharing (a VMM allocation travels as a
 * POSIX file descriptor, which a TCP connection cannot carry).
 *
 * The exporting engine runs one fd server: a thread serving an abstract Unix socket
 * "\0pdxfer-fd/<pid>/<nonce>" (SOCK_SEQPACKET). It holds descriptors under random 64-bit ids; a
 * client sends an id and gets a duplicate of that descriptor back (SCM_RIGHTS), or a status byte
 * saying no. Only a peer with the server's own uid (or root) is answered (SO_PEERCRED). Abstract
 * sockets live in the network namespace: two containers with their own namespaces cannot reach each
 * other this way (the caller falls back to another path).
 *
 * The client is blocking, bounded by a timeout, and talks only to the server thread of the other
 * process, which never waits on anything else: no deadlock, no unbounded stall.
 */
#ifndef PDR_TRANSPORT_FDPASS_H
#define PDR_TRANSPORT_FDPASS_H

#include <stddef.h>
#include <stdint.h>

struct pdr__fdsrv;

/* Starts a server (its socket and thread). 0 or a PDR_E* code. */
int pdr__fdsrv_start(struct pdr__fdsrv **out);
/* Where clients find it. */
uint32_t pdr__fdsrv_pid(const struct pdr__fdsrv *srv);
uint64_t pdr__fdsrv_nonce(const struct pdr__fdsrv *srv);
/* Takes ownership of fd and names it with a new random id. */
int pdr__fdsrv_add(struct pdr__fdsrv *srv, int fd, uint64_t *id);
/* Closes the descriptor behind id (no-op for an unknown id). */
void pdr__fdsrv_drop(struct pdr__fdsrv *srv, uint64_t id);
/* How many descriptors it holds. */
size_t pdr__fdsrv_count(struct pdr__fdsrv *srv);
/* Stops the thread, closes the socket and every held descriptor, frees srv. NULL is a no-op. */
void pdr__fdsrv_stop(struct pdr__fdsrv *srv);

/* Asks the server (pid, nonce) for descriptor id: *fd is a new descriptor of this process. 0,
 * PDR_EINVAL (unknown id or refused), PDR_ECONNREFUSED (no such server here), PDR_ETIMEDOUT, or
 * another PDR_E* code. */
int pdr__fdsrv_fetch(uint32_t pid, uint64_t nonce, uint64_t id, int timeout_ms, int *fd);

#endif
