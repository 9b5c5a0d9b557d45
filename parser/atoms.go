package parser

import "net/netip"

// parseIPv4 parses a dotted quad without allocating.
func parseIPv4(b []byte) (netip.Addr, bool) {
	var a [4]byte
	i := 0
	for k := 0; k < 4; k++ {
		if k > 0 {
			if i >= len(b) || b[i] != '.' {
				return netip.Addr{}, false
			}
			i++
		}
		v, n := 0, 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			v = v*10 + int(b[i]-'0')
			i++
			n++
			if n > 3 {
				return netip.Addr{}, false
			}
		}
		if n == 0 || v > 255 {
			return netip.Addr{}, false
		}
		a[k] = byte(v)
	}
	if i != len(b) {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4(a), true
}

// HexDigit is the value of one hexadecimal digit, either case: how
// dhcpd reads the digits of octets and of \x escapes, in leases files and
// in dhcpd.conf alike.
func HexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// parseHex parses colon-separated octets of one or two hex digits
// ("0:16:3e:a:b:c" as binary-to-ascii writes them, or padded).
func parseHex(b []byte) ([]byte, bool) {
	return parseHexTo(make([]byte, 0, (len(b)+1)/3), b)
}

// parseHexTo is parseHex appending to out.
func parseHexTo(out, b []byte) ([]byte, bool) {
	if len(b) == 0 {
		return nil, false
	}
	var v byte
	n := 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == ':' {
			if n == 0 {
				return nil, false
			}
			out = append(out, v)
			v, n = 0, 0
			continue
		}
		d, ok := HexDigit(b[i])
		if !ok || n == 2 {
			return nil, false
		}
		v = v<<4 | d
		n++
	}
	return out, true
}

// neverYear: dhcpd reads any date in 2038 or later as "never"
// (parse_date_core, which avoids 32-bit overflow that way).
const neverYear = 2038

// parseDate parses dhcpd's "YYYY/MM/DD" and "HH:MM:SS" (UTC) into Unix
// seconds. Single-digit fields are accepted, as dhcpd's lexer does.
func parseDate(ymd, hms []byte) (Time, bool) {
	var f [6]int
	if !fields(ymd, '/', f[:3]) || !fields(hms, ':', f[3:]) {
		return NoTime, false
	}
	y, mo, d, h, mi, s := f[0], f[1], f[2], f[3], f[4], f[5]
	if y < 1900 && y >= 0 { // dhcpd accepts years since 1900
		y += 1900
	}
	if mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60 {
		return NoTime, false
	}
	if y >= neverYear {
		return Never, true
	}
	return Time(daysFromCivil(y, mo, d)*86400 + int64(h*3600+mi*60+s)), true
}

// fields splits b on sep into exactly len(out) decimal numbers.
func fields(b []byte, sep byte, out []int) bool {
	k, v, n := 0, 0, 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == sep {
			if n == 0 || k >= len(out) {
				return false
			}
			out[k] = v
			k++
			v, n = 0, 0
			continue
		}
		c := b[i]
		if c < '0' || c > '9' || n == 9 {
			return false
		}
		v = v*10 + int(c-'0')
		n++
	}
	return k == len(out)
}

// daysFromCivil returns days since 1970-01-01 for a proleptic Gregorian
// date (Howard Hinnant's algorithm).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era = (y - 399) / 400
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}
