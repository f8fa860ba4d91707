/* SP framing over an nng byte stream: the bytes nng 1.5's req0/rep0
 * sockets put on tcp://, tls+tcp:// and ipc://, produced and parsed by us
 * so that a request is read and answered on the thread that waits for it
 * (docs/protocol.md, Transport).
 *
 * Connection: each side sends 8 bytes, 0x00 'S' 'P' 0x00, its protocol
 * number (big-endian u16: req0 0x0030, rep0 0x0031), two zero bytes, and
 * checks the peer's. Then messages, each a length prefix (u64 big-endian;
 * on ipc:// preceded by a message-type byte 0x01) and that many bytes: the
 * request id (u32 big-endian, high bit set; a rep0 reply echoes the
 * request's id words) and the vmrpc body.
 *
 * Every call blocks the calling thread on aio (which must have no
 * callback): nng then completes it straight from the thread that did the
 * socket I/O, often the caller itself.
 */
#ifndef VMPROTO_SP_H
#define VMPROTO_SP_H

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VMP_SP_REQ0 0x0030u
#define VMP_SP_REP0 0x0031u
/* Bytes of a message prefix, at most (ipc: type byte + length). */
#define VMP_SP_PREFIX_MAX 9
/* Id words a rep0 peer walks through before giving up on a message
 * (nng's default maximum TTL). */
#define VMP_SP_MAX_HOPS 8

/* Whether url's transport frames messages with the ipc type byte. */
int vmp_sp_url_is_ipc(const char *url);

/* Moves every byte of iov (n entries, at most 8) through s: send when
 * is_send, else receive. Each step may take up to timeout (ms; <= 0: no
 * limit). Returns 0 or the nng error; *moved (may be NULL) receives the
 * bytes that did move, so a caller can tell a clean timeout (0) from a
 * stream left in mid-message. */
int vmp_sp_io(nng_stream *s, nng_aio *aio, int is_send, const nng_iov *iov, unsigned n,
              int32_t timeout_ms, size_t *moved);

/* The same for a receive, waiting for data on fd (the socket under s, from
 * vmp_sp_stream_fd; -1: as vmp_sp_io) with poll() on the calling thread
 * before each step. nng 1.5 tries a read at once when it is asked for one
 * and only when nothing is there hands the wait to its poller thread,
 * which then wakes the caller: waiting here instead, the kernel wakes the
 * caller itself and nng's read completes on the spot (docs/performance.md,
 * Round trip). */
int vmp_sp_recv_fd(nng_stream *s, nng_aio *aio, int fd, const nng_iov *iov, unsigned n,
                   int32_t timeout_ms, size_t *moved);

/* Bytes a reader buffers: small messages arrive with one read. */
#define VMP_SP_RBUF (16u << 10)

/* A buffered reader of one stream (used by one thread at a time). */
typedef struct vmp_sp_reader {
  nng_stream *s;
  nng_aio *aio; /* callback-free */
  int fd;       /* the socket for poll() (vmp_sp_stream_fd), or -1 */
  size_t off, len;
  uint8_t buf[VMP_SP_RBUF];
} vmp_sp_reader_t;

/* Reads n bytes into dst: buffered bytes first, then what is missing with
 * as few reads as it takes (refilling the buffer with whatever has arrived
 * for small rests, straight into dst for large ones). Each wait may take
 * timeout_ms (<= 0: no limit); *moved as for vmp_sp_io. */
int vmp_sp_read(vmp_sp_reader_t *r, void *dst, size_t n, int32_t timeout_ms, size_t *moved);

/* The socket under a plain TCP stream (not TLS, not ipc): the descriptor
 * of this process whose local and peer addresses are the stream's, found
 * with getsockname/getpeername; -1 when there is none (or it cannot be
 * told). Only for waiting on with poll(); all I/O stays nng's. */
int vmp_sp_stream_fd(nng_stream *s);

/* Sends our 8-byte header (self) and checks the peer's (it must announce
 * peer): 0, NNG_EPROTO for anything else, or the I/O error. */
int vmp_sp_handshake(nng_stream *s, nng_aio *aio, uint16_t self, uint16_t peer, int32_t timeout_ms);

/* Writes the prefix of a len-byte message into out; returns its size (8,
 * or 9 for ipc). */
size_t vmp_sp_prefix(int ipc, uint64_t len, uint8_t out[VMP_SP_PREFIX_MAX]);
/* Parses a received prefix (vmp_sp_prefix(ipc, 0, ...) bytes): 0 and
 * *len, or NNG_EPROTO (ipc message type other than 1). */
int vmp_sp_prefix_parse(int ipc, const uint8_t *in, uint64_t *len);

/* Bytes of the id words at the start of a request as a rep0 peer reads
 * them (words up to and including the first with the high bit set):
 * 0 when the message is shorter than that (malformed: close the
 * connection), -1 when there are more than VMP_SP_MAX_HOPS (drop it). */
int vmp_sp_request_header(const uint8_t *msg, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* VMPROTO_SP_H */
