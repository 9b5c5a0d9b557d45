package main

// The hook parses addresses itself rather than with net/netip, whose
// dependencies (unique, weak) cost about 50 µs of start-up per event.
// TestParseIPMatchesNetip and FuzzParseIP hold it to net/netip's
// behaviour for every input.

// parseIPv4 parses a dotted quad as net/netip does: four decimal fields
// of 0 to 255, no leading zeros, nothing else.
func parseIPv4(s string) ([4]byte, bool) {
	var a [4]byte
	i := 0
	for f := 0; f < 4; f++ {
		if f > 0 {
			if i == len(s) || s[i] != '.' {
				return a, false
			}
			i++
		}
		start, v := i, 0
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			v = v*10 + int(s[i]-'0')
			if v > 255 || i > start && s[start] == '0' {
				return a, false
			}
			i++
		}
		if i == start {
			return a, false
		}
		a[f] = byte(v)
	}
	return a, i == len(s)
}

// parseIPv6 parses RFC 4291 text without a zone: up to eight groups of
// one to four hex digits, at most one "::" standing for one or more zero
// groups, optionally ending in a dotted quad that fills the last two.
func parseIPv6(s string) ([16]byte, bool) {
	var ip [16]byte
	gap := -1 // byte offset where "::" stands
	if len(s) >= 2 && s[0] == ':' && s[1] == ':' {
		gap, s = 0, s[2:]
		if s == "" {
			return ip, true
		}
	}
	n := 0 // bytes filled
	for n < 16 {
		d, v := 0, 0
		for d < len(s) {
			h, ok := hexValue(s[d])
			if !ok {
				break
			}
			if d == 4 {
				return ip, false
			}
			v = v<<4 | h
			d++
		}
		if d == 0 {
			return ip, false
		}
		if d < len(s) && s[d] == '.' {
			// A dotted quad takes the last four bytes.
			if gap < 0 && n != 12 || n+4 > 16 {
				return ip, false
			}
			a, ok := parseIPv4(s)
			if !ok {
				return ip, false
			}
			copy(ip[n:], a[:])
			n += 4
			s = ""
			break
		}
		ip[n], ip[n+1] = byte(v>>8), byte(v)
		n += 2
		s = s[d:]
		if s == "" {
			break
		}
		if s[0] != ':' || len(s) == 1 {
			return ip, false
		}
		s = s[1:]
		if s[0] == ':' {
			if gap >= 0 {
				return ip, false
			}
			gap, s = n, s[1:]
			if s == "" {
				break
			}
		}
	}
	if s != "" {
		return ip, false
	}
	if n < 16 {
		if gap < 0 {
			return ip, false
		}
		// Move what follows the gap to the end, zeros in between.
		shift := 16 - n
		for j := n - 1; j >= gap; j-- {
			ip[j+shift] = ip[j]
		}
		for j := gap; j < gap+shift; j++ {
			ip[j] = 0
		}
	} else if gap >= 0 {
		// "::" must stand for at least one group.
		return ip, false
	}
	return ip, true
}

// appendIPv6 appends ip in RFC 5952's canonical form: lower-case hex
// without leading zeros, the longest run of two or more zero groups
// (the first of equals) written "::".
func appendIPv6(b []byte, ip [16]byte) []byte {
	group := func(i int) int { return int(ip[2*i])<<8 | int(ip[2*i+1]) }
	zs, ze := -1, -1
	for i := 0; i < 8; {
		if group(i) != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && group(j) == 0 {
			j++
		}
		if j-i >= 2 && j-i > ze-zs {
			zs, ze = i, j
		}
		i = j
	}
	const hex = "0123456789abcdef"
	for i := 0; i < 8; i++ {
		if i == zs {
			b = append(b, ':', ':')
			i = ze - 1
			continue
		}
		if i > 0 && i != ze {
			b = append(b, ':')
		}
		g, started := group(i), false
		for shift := 12; shift >= 0; shift -= 4 {
			if d := g >> shift & 0xf; d != 0 || started || shift == 0 {
				b = append(b, hex[d])
				started = true
			}
		}
	}
	return b
}

func hexValue(c byte) (int, bool) {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0'), true
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10, true
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10, true
	}
	return 0, false
}

// isV4Mapped reports whether ip is in ::ffff:0:0/96, an IPv4 address
// written as IPv6 (net/netip's Is4In6).
func isV4Mapped(ip [16]byte) bool {
	for _, b := range ip[:10] {
		if b != 0 {
			return false
		}
	}
	return ip[10] == 0xff && ip[11] == 0xff
}
