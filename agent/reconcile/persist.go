package reconcile

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/bits"
	"net/netip"
	"slices"

	"go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/parser"
)

// The reconciler's state lives in the outbox file, in the key/value
// bucket named bucketName (outbox.Update), so that a change to it and the
// events it queues commit together:
//
//	reconcile/version    1
//	reconcile/baselined  present once a first complete snapshot was taken
//	reconcile/pos        JSON Position: where reading dhcpd.leases stopped
//	reconcile/pair       JSON Pair: dhcpd's failover pair and its states as of pos (absent alone)
//	reconcile/file/IP    the IP's last block (encodeLease; an IPv6 block's DUID last, when it has one)
//	reconcile/told/IP    the last event queued for the IP (encodeTold)
//	reconcile/pending/IP JSON []Pending: synthesised events waiting
//	reconcile/replay/IP  JSON Replay: the pair replay last queued (failover.go)
//
// IP keys are the address's 4 or 16 bytes. Only the entries that
// changed are written (State.TakeDirty: which of an address's file, told
// and pending records), so a commit costs what changed, not the table: a
// file of 100 000 leases is written in full once, at the baseline, and a
// hook event writes its address's told record alone.
const bucketName = "reconcile"

var (
	keyVersion   = []byte("version")
	keyBaselined = []byte("baselined")
	keySureMode  = []byte("sure-mode")
	keyPos       = []byte("pos")
	keyPair      = []byte("pair")
	keyPeers     = []byte("peers") // the pairs besides the lead one, and the subnets' peers (peers.go)
	subFile      = []byte("file")
	subTold      = []byte("told")
	subPending   = []byte("pending")
	subReplay    = []byte("replay")
)

const persistVersion = 1

// Position is where the reconciler stopped reading dhcpd.leases: the file
// (device and inode) and the end of the last statement it applied. The
// hashes of the file's first bytes and of the bytes before Offset let a
// restarted agent check that the file at that inode is still the one it
// read (inodes are reused) before reading only what follows.
type Position struct {
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	Offset  int64  `json:"offset"`
	HeadLen int    `json:"head_len"`
	Head    uint64 `json:"head"`
	TailLen int    `json:"tail_len"`
	Tail    uint64 `json:"tail"`
}

// checkLen bounds the bytes hashed at each end of the read part.
const checkLen = 4096

// positionOf computes the position at offset in r, a file with identity id.
func positionOf(r io.ReaderAt, id fileID, offset int64) (Position, error) {
	p := Position{Dev: id.Dev, Ino: id.Ino, Offset: offset}
	var err error
	p.HeadLen = int(min(offset, checkLen))
	if p.Head, err = hashAt(r, 0, p.HeadLen); err != nil {
		return Position{}, err
	}
	p.TailLen = int(min(offset, checkLen))
	if p.Tail, err = hashAt(r, offset-int64(p.TailLen), p.TailLen); err != nil {
		return Position{}, err
	}
	return p, nil
}

// matches reports whether r (a file with identity id and size) is the file
// p was taken on, with the same bytes before p.Offset.
func (p Position) matches(r io.ReaderAt, id fileID, size int64) bool {
	if id.Dev != p.Dev || id.Ino != p.Ino || size < p.Offset {
		return false
	}
	q, err := positionOf(r, id, p.Offset)
	return err == nil && q == p
}

func hashAt(r io.ReaderAt, off int64, n int) (uint64, error) {
	h := fnv.New64a()
	if n == 0 {
		return h.Sum64(), nil
	}
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, off); err != nil {
		return 0, err
	}
	h.Write(buf)
	return h.Sum64(), nil
}

// record is one key to write (val nil: delete) in a sub-bucket, or in the
// top bucket when sub is nil.
type record struct {
	sub, key, val []byte
}

// records encodes what d says changed, from s's current content, plus the
// position when pos is not nil.
func records(s *State, d Dirty, pos *Position) ([]record, error) {
	// bbolt inserts into a node's sorted slice and splits nodes only at
	// commit: keys in random order cost a memmove of the node each, which
	// is quadratic for a large first write. In key order they append: the
	// sub-buckets in name order (file, pending, replay, told), each in address
	// order (byte order within a family). The addresses are sorted once,
	// not the records.
	type change struct {
		ip  netip.Addr
		key []byte
		c   Changed
	}
	// Keys and values are appended to one buffer (bbolt keeps what Put
	// is given until the transaction ends): an allocation per round,
	// not one per key and value.
	var buf arena
	changes := make([]change, 0, len(d.IPs))
	n := 4
	for ip, c := range d.IPs {
		changes = append(changes, change{ip: ip, c: c})
		n += bits.OnesCount8(uint8(c)) // a record per sub-bucket changed
	}
	slices.SortFunc(changes, func(a, b change) int { return a.ip.Compare(b.ip) })
	buf.grow(len(changes) * 96) // about a key, a block and a told record
	for i := range changes {
		// The key as AsSlice has it: 4 or 16 bytes (no zone).
		k, _ := changes[i].ip.WithZone("").AppendBinary(buf.b) // never fails
		changes[i].key = buf.add(k)
	}
	recs := make([]record, 0, n)
	// Only the entries that changed: a hook event changes the address's
	// Told alone, and its block stays as it was.
	for _, x := range changes {
		if x.c&ChangedFile != 0 {
			var f []byte
			if l, ok := s.File[x.ip]; ok {
				f = buf.add(appendLease(buf.b, l))
			}
			recs = append(recs, record{subFile, x.key, f})
		}
	}
	for _, x := range changes {
		if x.c&ChangedPending != 0 {
			var p []byte
			if q := s.Pending[x.ip]; len(q) > 0 {
				var err error
				if p, err = json.Marshal(q); err != nil {
					return nil, fmt.Errorf("pending %s: %w", x.ip, err)
				}
			}
			recs = append(recs, record{subPending, x.key, p})
		}
	}
	for _, x := range changes {
		if x.c&ChangedReplay != 0 {
			var v []byte
			if rp := s.Replays[x.ip]; len(rp) > 0 {
				var err error
				if v, err = json.Marshal(rp); err != nil {
					return nil, fmt.Errorf("replay %s: %w", x.ip, err)
				}
			}
			recs = append(recs, record{subReplay, x.key, v})
		}
	}
	for _, x := range changes {
		if x.c&ChangedTold != 0 {
			var t []byte
			if told, ok := s.Told[x.ip]; ok {
				t = buf.add(appendTold(buf.b, told))
			}
			recs = append(recs, record{subTold, x.key, t})
		}
	}
	if d.Meta {
		var v []byte
		if s.Baselined {
			v = []byte{1}
		}
		recs = append(recs, record{nil, keyBaselined, v})
		var mv []byte
		if s.SureMode != "" {
			mv = []byte(s.SureMode)
		}
		recs = append(recs, record{nil, keySureMode, mv})
		var pv []byte
		if s.Pair.InPair() {
			var err error
			if pv, err = json.Marshal(s.Pair); err != nil {
				return nil, err
			}
		}
		recs = append(recs, record{nil, keyPair, pv})
		var sv []byte
		if s.peers != nil {
			var err error
			if sv, err = json.Marshal(s.peers); err != nil {
				return nil, err
			}
		}
		recs = append(recs, record{nil, keyPeers, sv})
	}
	if pos != nil {
		v, err := json.Marshal(pos)
		if err != nil {
			return nil, err
		}
		recs = append(recs, record{nil, keyPos, v})
	}
	return recs, nil
}

// arena is records' buffer: each record is appended to b, and add cuts
// it off with its capacity ending where it does, so nothing appended
// later writes into it. When an append outgrows b, the records cut off
// before stay in the old array.
type arena struct{ b []byte }

// grow makes room for about n more bytes.
func (a *arena) grow(n int) {
	if cap(a.b)-len(a.b) < n {
		a.b = make([]byte, 0, n)
	}
}

// add takes b, a.b with one record appended, and returns that record.
func (a *arena) add(b []byte) []byte {
	r := b[len(a.b):len(b):len(b)]
	a.b = b
	return r
}

// write applies recs to the reconciler's bucket b.
func write(b *bbolt.Bucket, recs []record) error {
	if err := b.Put(keyVersion, []byte{persistVersion}); err != nil {
		return err
	}
	subs := map[string]*bbolt.Bucket{}
	for _, r := range recs {
		bk := b
		if r.sub != nil {
			if bk = subs[string(r.sub)]; bk == nil {
				var err error
				if bk, err = b.CreateBucketIfNotExists(r.sub); err != nil {
					return err
				}
				subs[string(r.sub)] = bk
			}
		}
		var err error
		if r.val == nil {
			err = bk.Delete(r.key)
		} else {
			err = bk.Put(r.key, r.val)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// load reads the state and position stored in b (nil: nothing stored).
// Records that do not decode are skipped and counted: losing one
// address's history costs at most one missed or repeated event, while
// refusing to start would cost them all.
func load(b *bbolt.Bucket, grace int64) (s *State, pos *Position, bad int, err error) {
	s = NewState(grace)
	if b == nil {
		return s, nil, 0, nil
	}
	if v := b.Get(keyVersion); v != nil && (len(v) != 1 || v[0] != persistVersion) {
		return nil, nil, 0, fmt.Errorf("stored state has version %v; this agent reads %d", v, persistVersion)
	}
	s.Baselined = b.Get(keyBaselined) != nil
	if v := b.Get(keySureMode); v != nil {
		switch m := Mode(v); m {
		case ModeReplacement, ModeComplement, ModeHookless:
			s.SureMode = m
		default:
			bad++
		}
	}
	if v := b.Get(keyPos); v != nil {
		var p Position
		if json.Unmarshal(v, &p) == nil {
			pos = &p
		} else {
			bad++
		}
	}
	if v := b.Get(keyPair); v != nil {
		if json.Unmarshal(v, &s.Pair) != nil {
			s.Pair = Pair{}
			bad++
		}
	}
	if v := b.Get(keyPeers); v != nil {
		var ps peerSet
		if json.Unmarshal(v, &ps) == nil {
			s.peers = &ps
		} else {
			bad++
		}
	}
	each := func(sub []byte, fn func(ip netip.Addr, v []byte) error) {
		sb := b.Bucket(sub)
		if sb == nil {
			return
		}
		sb.ForEach(func(k, v []byte) error { //nolint:errcheck // fn never fails the walk
			ip, ok := netip.AddrFromSlice(k)
			if !ok || fn(ip, v) != nil {
				bad++
			}
			return nil
		})
	}
	each(subFile, func(ip netip.Addr, v []byte) error {
		l, err := decodeLease(v)
		if err == nil {
			s.File[ip] = l
		}
		return err
	})
	each(subTold, func(ip netip.Addr, v []byte) error {
		t, err := decodeTold(v)
		if err == nil {
			s.Told[ip] = t
		}
		return err
	})
	each(subPending, func(ip netip.Addr, v []byte) error {
		var q []Pending
		err := json.Unmarshal(v, &q)
		if err == nil && len(q) > 0 {
			s.Pending[ip] = q
		}
		return err
	})
	each(subReplay, func(ip netip.Addr, v []byte) error {
		rp, err := decodeReplays(v)
		if err == nil && len(rp) > 0 {
			s.Replays[ip] = rp
		}
		return err
	})
	return s, pos, bad, nil
}

// decodeReplays reads an address's replay records: a JSON array, or
// the one object an agent before maxReplays wrote.
func decodeReplays(v []byte) ([]Replay, error) {
	if len(v) > 0 && v[0] == '{' {
		var rp Replay
		err := json.Unmarshal(v, &rp)
		return []Replay{rp}, err
	}
	var q []Replay
	err := json.Unmarshal(v, &q)
	return q, err
}

var errShortRecord = errors.New("short record")

// encodeLease: version, state, family, starts, ends (varints), MAC and
// hostname (length-prefixed). Version 1 ends there, or with the DUID;
// version 2, written only for a block this server acked (Lease.Acked),
// has the DUID (empty or not) and a flags byte after it: 1 Acked. An
// older agent refuses a version 2 record (errShortRecord) and goes on
// without it.
func encodeLease(l Lease) []byte {
	return appendLease(make([]byte, 0, 4+2*binary.MaxVarintLen64+3+len(l.MAC)+len(l.Hostname)+len(l.DUID)), l)
}

// appendLease appends encodeLease's record of l to b.
func appendLease(b []byte, l Lease) []byte {
	if l.Acked {
		b = append(b, 2, byte(l.State), familyByte(l.Family))
		b = binary.AppendVarint(b, l.Starts)
		b = binary.AppendVarint(b, l.Ends)
		b = appendString(b, l.MAC)
		b = appendString(b, l.Hostname)
		b = appendString(b, l.DUID)
		return append(b, 1)
	}
	b = append(b, 1, byte(l.State), familyByte(l.Family))
	b = binary.AppendVarint(b, l.Starts)
	b = binary.AppendVarint(b, l.Ends)
	b = appendString(b, l.MAC)
	b = appendString(b, l.Hostname)
	if l.DUID != "" {
		// Appended only when there is one, so IPv4 records stay as an
		// older agent wrote (and reads) them.
		b = appendString(b, l.DUID)
	}
	return b
}

func decodeLease(b []byte) (Lease, error) {
	var l Lease
	if len(b) < 3 || (b[0] != 1 && b[0] != 2) {
		return l, errShortRecord
	}
	l.State, l.Family = parser.State(b[1]), familyName(b[2])
	r := reader{b: b[3:]}
	l.Starts, l.Ends = r.varint(), r.varint()
	l.MAC, l.Hostname = r.str(), r.str()
	switch {
	case r.err != nil:
	case b[0] == 2:
		l.DUID = r.str()
		if r.err == nil && (len(r.b) != 1 || r.b[0] != 1) {
			r.err = errShortRecord
		}
		l.Acked = true
	case len(r.b) > 0:
		l.DUID = r.str()
	}
	return l, r.err
}

// encodeTold: version 1 is action, time (varint), MAC, and a last flags
// byte when a flag is set (absent otherwise, so records read as an older
// agent wrote them): 1 Recorded, 2 PeerOwns. Version 2, written only when
// AtNS is set, has the flags byte and AtNS (varint) after the MAC. An
// older agent refuses a version 2 record, or one with a flag it does not
// know (errShortRecord), and goes on without it. Flag 4 has Ends
// (varint) follow AtNS; flag 8 has OwnAt (varint, as At minus OwnAt) and
// OwnAtNS (varint) follow, written only when set (Told: both 0 means
// At and AtNS themselves). Flag 16 is Spoke, flag 32 Interrupted,
// flag 64 OwnDropped (nothing follows these).
func encodeTold(t Told) []byte {
	return appendTold(make([]byte, 0, 3+4*binary.MaxVarintLen64+2+len(t.MAC)), t)
}

// appendTold appends encodeTold's record of t to b.
func appendTold(b []byte, t Told) []byte {
	own := t.OwnAt != 0 || t.OwnAtNS != 0
	version := byte(1)
	if t.AtNS != 0 || t.Ends != 0 || own || t.Spoke || t.Interrupted || t.OwnDropped {
		version = 2
	}
	b = append(b, version, actionByte(t.Action))
	b = binary.AppendVarint(b, t.At)
	b = appendString(b, t.MAC)
	var flags byte
	if t.Recorded {
		flags |= 1
	}
	if t.PeerOwns {
		flags |= 2
	}
	switch {
	case version == 2:
		if t.Ends != 0 {
			flags |= 4
		}
		if own {
			flags |= 8
		}
		if t.Spoke {
			flags |= 16
		}
		if t.Interrupted {
			flags |= 32
		}
		if t.OwnDropped {
			flags |= 64
		}
		b = append(b, flags)
		b = binary.AppendVarint(b, t.AtNS)
		if t.Ends != 0 {
			b = binary.AppendVarint(b, t.Ends)
		}
		if own {
			b = binary.AppendVarint(b, t.At-t.OwnAt)
			b = binary.AppendVarint(b, t.OwnAtNS)
		}
	case flags != 0:
		b = append(b, flags)
	}
	return b
}

func decodeTold(b []byte) (Told, error) {
	var t Told
	if len(b) < 2 || (b[0] != 1 && b[0] != 2) {
		return t, errShortRecord
	}
	t.Action = actionName(b[1])
	r := reader{b: b[2:]}
	t.At, t.MAC = r.varint(), r.str()
	if r.err == nil && t.Action == "" {
		r.err = fmt.Errorf("unknown action %d", b[1])
	}
	switch {
	case r.err != nil:
	case b[0] == 2:
		if len(r.b) < 1 || r.b[0]&^127 != 0 {
			return t, errShortRecord
		}
		flags := r.b[0]
		t.Recorded, t.PeerOwns, t.Spoke, t.Interrupted, t.OwnDropped = flags&1 != 0, flags&2 != 0, flags&16 != 0, flags&32 != 0, flags&64 != 0
		r.b = r.b[1:]
		t.AtNS = r.varint()
		if flags&4 != 0 {
			if t.Ends = r.varint(); r.err == nil && t.Ends == 0 {
				r.err = errShortRecord
			}
		}
		if flags&8 != 0 {
			t.OwnAt = t.At - r.varint()
			t.OwnAtNS = r.varint()
		}
		if r.err == nil && len(r.b) > 0 {
			r.err = errShortRecord
		}
	case len(r.b) > 0:
		if len(r.b) != 1 || r.b[0] == 0 || r.b[0]&^3 != 0 {
			r.err = errShortRecord
		}
		t.Recorded, t.PeerOwns = r.b[0]&1 != 0, r.b[0]&2 != 0
	}
	return t, r.err
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errShortRecord
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) str() string {
	if r.err != nil {
		return ""
	}
	n, k := binary.Uvarint(r.b)
	if k <= 0 || uint64(len(r.b)-k) < n {
		r.err = errShortRecord
		return ""
	}
	s := string(r.b[k : k+int(n)])
	r.b = r.b[k+int(n):]
	return s
}

var actions = [...]string{"", "commit", "expiry", "release"}

func actionByte(a string) byte {
	for i, x := range actions {
		if i > 0 && x == a {
			return byte(i)
		}
	}
	return 0
}

func actionName(b byte) string {
	if int(b) < len(actions) {
		return actions[b]
	}
	return ""
}

func familyByte(f string) byte {
	switch f {
	case parser.IPv4.String():
		return 4
	case parser.IPv6.String():
		return 6
	}
	return 0
}

func familyName(b byte) string {
	switch b {
	case 4:
		return parser.IPv4.String()
	case 6:
		return parser.IPv6.String()
	}
	return parser.FamilyUnknown.String()
}
