/* DnsList: a flow's DNS messages as the flow record decoder read them, one small C entry each.
 *
 * The analysis process reads every ended flow from a flow record batch (fastpath.decode_records). A flow's DNS
 * messages used to become a list of DnsMessage objects, each with its answers list and int and bool fields: on
 * the bench corpus's DNS flood (18,094 messages in 335 flows) making and freeing them was about 40% of the
 * decoder's time, and the C loops that read them (dpi: DnsScanner, dga_scan, dns_first_hits) spent as much
 * again fetching their attributes one by one. A DnsList keeps, per message, the fields those loops read (an
 * entry: timestamp, flags, codes, the query name's str, the first answer's TTL) and the message's encoding, and
 * makes the DnsMessage of an entry only when Python asks for it (indexing, iteration, equality, a sample that
 * links to it); that object is then kept, so asking twice gives the same one.
 *
 * To Python a DnsList is a read-only sequence of DnsMessage equal to the list the decoder made before (the
 * tests hold it so: tests/appliance/native/test_dns_list.py). fastpath.c defines the type and fills it; dpi.c
 * reads the entries in place when flow.dns is one (its loops keep their object path for every other sequence:
 * flows analysed in the server's own process, the reference twins' inputs).
 */

#ifndef DNS_LIST_H
#define DNS_LIST_H

typedef struct {
    uint64_t ts;          /* timestamp_ns */
    uint32_t id, rcode, qtype, qclass;
    uint32_t first_ttl;   /* the first answer's ttl (answered) */
    uint8_t is_response, malformed, answered; /* answered: the message has at least one answer */
    PyObject *qname;      /* str (held) */
    uint32_t at, len;     /* the message's encoding (sensor.flows.DnsMessage) in the list's blob */
} DnsEntry;

typedef struct {
    PyObject_VAR_HEAD      /* ob_size: the number of messages */
    PyObject *make_dns, *make_answer; /* what makes a DnsMessage and its DnsAnswers (held) */
    PyObject **made;       /* made[i]: entry i's DnsMessage once asked for; NULL until the first is */
    uint8_t *blob;         /* the messages' encodings, one after the other */
    DnsEntry entries[];
} DnsListObject;

#define DNSL_NXDOMAIN 3

#endif
