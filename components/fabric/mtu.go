package fabric

import "fmt"

// VXLANOverhead is how many bytes VXLAN over IPv4 adds to a packet of an
// attachment on its way across the underlay: the outer IPv4 (20), UDP (8)
// and VXLAN (8) headers around the attachment's Ethernet frame, whose own
// header (14) the attachment's MTU does not count.
const VXLANOverhead = 20 + 8 + 8 + 14

// The MTUs an attachment's interface may have.
const (
	// MinMTU is the smallest: the datagram size every IPv4 host must
	// accept (RFC 791).
	MinMTU = 576
	// MaxMTU is the largest: the jumbo frame size common switches carry.
	MaxMTU = 9216
)

// AttachmentMTU returns the MTU of the interfaces of attachments whose
// tunnel traffic crosses an underlay of MTU underlayMTU: room for the VXLAN
// encapsulation, so that a full-size packet still fits the underlay once
// encapsulated. It returns an error when that is not in [MinMTU, MaxMTU].
func AttachmentMTU(underlayMTU int) (int, error) {
	mtu := underlayMTU - VXLANOverhead
	if err := ValidateMTU(mtu); err != nil {
		return 0, fmt.Errorf("underlay MTU %d leaves %d for attachments: %w", underlayMTU, mtu, err)
	}
	return mtu, nil
}

// ValidateMTU returns an error when an attachment's interface cannot have
// MTU mtu.
func ValidateMTU(mtu int) error {
	if mtu < MinMTU || mtu > MaxMTU {
		return fmt.Errorf("MTU %d is not in [%d,%d]", mtu, MinMTU, MaxMTU)
	}
	return nil
}
