/* The frame codec: the bytes nng 1.5's req0/rep0 sockets put on tcp://,
 * tls+tcp:// and ipc://, built and parsed here without any I/O, so that
 * the client, the agent and the agent<->worker link frame their messages
 * with one piece of code (docs/protocol.md, Transport).
 *
 * Connection: each side sends 8 bytes, 0x00 'S' 'P' 0x00, its protocol
 * number (big-endian u16: req0 0x0030, rep0 0x0031), two zero bytes, and
 * checks the peer's. Then messages, each a length prefix (u64 big-endian;
 * on ipc:// preceded by a message-type byte 0x01) and that many bytes: the
 * request id words (u32 big-endian; the last, and for a direct peer the
 * only one, has the high bit set; a rep0 reply echoes them) and the body.
 *
 * Errors are nng's numbers (NNG_EPROTO ...), the codes every layer above
 * already speaks.
 */
#ifndef VMTRANSPORT_FRAME_H
#define VMTRANSPORT_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VMT_SP_REQ0 0x0030u
#define VMT_SP_REP0 0x0031u
/* Bytes of the SP connection header. */
#define VMT_HANDSHAKE_LEN 8
/* Bytes of a message prefix, at most (ipc: type byte + length). */
#define VMT_PREFIX_MAX 9
/* Id words a rep0 peer walks through before giving up on a message
 * (nng's default maximum TTL). */
#define VMT_MAX_HOPS 8
/* Prefix and one id word: what a direct request/reply carries before its
 * body, at most. */
#define VMT_HEAD_MAX (VMT_PREFIX_MAX + 4)

/* Whether url's transport frames messages with the ipc type byte. */
int vmt_url_is_ipc(const char *url);

/* The 8 bytes that announce protocol self. */
void vmt_handshake_make(uint16_t self, uint8_t out[VMT_HANDSHAKE_LEN]);
/* 0 when in announces protocol peer, else NNG_EPROTO. */
int vmt_handshake_check(const uint8_t in[VMT_HANDSHAKE_LEN], uint16_t peer);

/* Bytes of a prefix on this transport (8, or 9 for ipc). */
size_t vmt_prefix_len(int ipc);
/* Writes the prefix of a len-byte message into out; returns its size. */
size_t vmt_prefix_make(int ipc, uint64_t len, uint8_t out[VMT_PREFIX_MAX]);
/* Parses a received prefix (vmt_prefix_len(ipc) bytes): 0 and *len, or
 * NNG_EPROTO (an ipc message type other than 1). */
int vmt_prefix_parse(int ipc, const uint8_t *in, uint64_t *len);

/* The id word of a direct request: the high bit and the low 31 bits of
 * seq. */
uint32_t vmt_id_make(uint64_t seq);
void vmt_id_put(uint32_t id, uint8_t out[4]);
uint32_t vmt_id_get(const uint8_t in[4]);
/* Writes prefix and id of a message whose body is body_len bytes into
 * out (VMT_HEAD_MAX bytes); returns the bytes written. */
size_t vmt_head_make(int ipc, uint32_t id, uint64_t body_len, uint8_t out[VMT_HEAD_MAX]);

/* Bytes of the id words at the start of a request as a rep0 peer reads
 * them (words up to and including the first with the high bit set): 0
 * when the message is shorter than that (malformed: close the
 * connection), -1 when there are more than VMT_MAX_HOPS (drop it). */
int vmt_request_header(const uint8_t *msg, size_t len);

/* Moves an iovec array on by n bytes that were transferred: *iov and *cnt
 * then describe what is left (entries done are skipped, the first left is
 * shortened). The array is modified in place. */
void vmt_iov_advance(struct iovec **iov, unsigned *cnt, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* VMTRANSPORT_FRAME_H */
