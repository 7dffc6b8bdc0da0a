/* SampleList: a flow's payload samples as the flow record decoder read them, one small C entry each.
 *
 * The analysis process reads every ended flow from a flow record batch (fastpath.decode_records). A TCP flow's
 * samples used to become a list of Packet objects (fifteen fields each, the payload a bytes object of its own):
 * on the bench corpus (8,914 samples in 4,369 TCP flows) that was 5 of the decoder's 19 ms a pass, for packets
 * that one C call (dpi.sample_facts) then read two attributes of. A SampleList keeps, per sample, its encoding
 * (sensor.flows.SamplePacket) and where its payload and direction are, and makes the Packet of an entry only when
 * Python asks for it (indexing, iteration, equality); that object is then kept, so asking twice gives the same one.
 *
 * To Python a SampleList is a read-only sequence of Packet equal to the list the decoder made before (the tests
 * hold it so: tests/appliance/native/test_sample_list.py). fastpath.c defines the type and fills it; dpi.c reads
 * the entries in place when flow.samples is one (sample_facts keeps its object path for every other sequence:
 * flows analysed in the server's own process, the reference twins' inputs). The twin of dns_list.h.
 */

#ifndef SAMPLE_LIST_H
#define SAMPLE_LIST_H

typedef struct {
    uint32_t at, len;         /* the sample's encoding in the list's blob */
    uint32_t payload, size;   /* its payload field: offset in the blob and length (0, 0: absent, empty) */
    uint8_t direction;        /* 1 outbound, 2 inbound, 0 any other value (as sample_facts tells them) */
} SampleEntry;

typedef struct {
    PyObject_VAR_HEAD          /* ob_size: the number of samples */
    PyObject *make_packet, *make_icmp; /* what makes a Packet and its IcmpInfo (held) */
    PyObject *head[6];         /* the record's protocol, transport, local/remote ip, local/remote port (held) */
    PyObject *dns;             /* the record's DnsList: a sample's dns_index names one of its messages (held) */
    uint32_t protocol;
    PyObject **made;           /* made[i]: entry i's Packet once asked for; NULL until the first is */
    uint8_t *blob;             /* the samples' encodings, one after the other */
    SampleEntry entries[];
} SampleListObject;

#endif
