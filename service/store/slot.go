package store

// ClusterSlots is the number of hash slots of a Redis Cluster.
const ClusterSlots = 16384

// Slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of the key's
// hash tag, the text between the first '{' and the next '}' when that is not
// empty, or of the whole key otherwise, modulo ClusterSlots. Keys with the
// same slot can be used by one script on a cluster.
func Slot(key string) int {
	if i := indexByte(key, '{'); i >= 0 {
		if j := indexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^key[k]]
	}
	return int(crc) % ClusterSlots
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// crc16Table is CRC16-CCITT (XMODEM, polynomial 0x1021), as Redis Cluster
// uses it.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
