// Package h2raw is a raw HTTP/2 client for tests of a gRPC server: it
// sends exactly the frames a test writes — streams whose message never
// comes, messages cut short — as an attacker would, and reads how the
// server ends them.
package h2raw

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Conn is a raw HTTP/2 client connection. It is not safe for concurrent
// use, but for one goroutine writing and one reading.
type Conn struct {
	Conn net.Conn
	Fr   *http2.Framer
	// Settings are the server's first SETTINGS.
	Settings map[http2.SettingID]uint32
	next     uint32         // the next stream id
	dec      *hpack.Decoder // the server's header blocks (its dynamic table lasts the connection)
	hbuf     bytes.Buffer
	enc      *hpack.Encoder
}

// Dial connects to addr, sends the client preface and empty SETTINGS, and
// reads the server's SETTINGS (within wait).
func Dial(addr string, wait time.Duration) (*Conn, error) { return DialFrom("", addr, wait) }

// DialFrom is Dial from the local IP address from (empty: any). On Linux
// any address of 127.0.0.0/8 reaches a listener on 127.0.0.1: a test can
// be many sources at once.
func DialFrom(from, addr string, wait time.Duration) (*Conn, error) {
	var d net.Dialer
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &Conn{Conn: nc, Fr: http2.NewFramer(nc, nc), Settings: map[http2.SettingID]uint32{}, next: 1, dec: hpack.NewDecoder(4096, nil)}
	c.enc = hpack.NewEncoder(&c.hbuf)
	if err := c.handshake(wait); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *Conn) handshake(wait time.Duration) error {
	if _, err := io.WriteString(c.Conn, http2.ClientPreface); err != nil {
		return err
	}
	if err := c.Fr.WriteSettings(); err != nil {
		return err
	}
	f, err := c.Read(wait)
	if err != nil {
		return err
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		return fmt.Errorf("first frame %v, want SETTINGS", f)
	}
	sf.ForeachSetting(func(s http2.Setting) error { c.Settings[s.ID] = s.Val; return nil })
	return c.Fr.WriteSettingsAck()
}

// Close closes the connection.
func (c *Conn) Close() error { return c.Conn.Close() }

// Read returns the next frame, or an error when none comes within wait.
func (c *Conn) Read(wait time.Duration) (http2.Frame, error) {
	c.Conn.SetReadDeadline(time.Now().Add(wait))
	return c.Fr.ReadFrame()
}

// Open starts a call of method with extra header fields (name, value,
// ...), sending its HEADERS without ending the stream, and returns its
// stream id.
func (c *Conn) Open(method string, extra ...string) (uint32, error) {
	c.hbuf.Reset()
	fields := append([]string{":method", "POST", ":scheme", "http", ":path", method, ":authority", "ratelimitd",
		"content-type", "application/grpc", "te", "trailers"}, extra...)
	for i := 0; i+1 < len(fields); i += 2 {
		c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	id := c.next
	c.next += 2
	return id, c.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true})
}

// SendPart sends, on stream id, the gRPC message prefix announcing a
// message of size bytes and the first part bytes of it, in DATA frames of
// at most 16 KiB, without ending the stream.
func (c *Conn) SendPart(id uint32, size, part int) error {
	b := make([]byte, 5+part)
	binary.BigEndian.PutUint32(b[1:5], uint32(size))
	return c.writeData(id, b)
}

// Send sends, on stream id, one whole gRPC message (its prefix and msg),
// in DATA frames of at most 16 KiB, without ending the stream.
func (c *Conn) Send(id uint32, msg []byte) error {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:5], uint32(len(msg)))
	return c.writeData(id, append(b, msg...))
}

// writeData sends b on stream id in DATA frames of at most 16 KiB, without
// ending the stream.
func (c *Conn) writeData(id uint32, b []byte) error {
	for len(b) > 0 {
		n := min(len(b), 16<<10)
		if err := c.Fr.WriteData(id, false, b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// Ended is how a stream ended: by RST_STREAM (RST) or by the server's
// trailers (Status, the grpc-status).
type Ended struct {
	ID     uint32
	RST    http2.ErrCode
	Status string
}

// NextEnd reads frames until one ends a stream (trailers with a
// grpc-status, or RST_STREAM with an error code other than NO_ERROR,
// which follows the trailers of a stream the client had not finished),
// answering pings and skipping the rest, for at most wait. A GOAWAY is an
// error.
func (c *Conn) NextEnd(wait time.Duration) (Ended, error) {
	deadline := time.Now().Add(wait)
	for {
		f, err := c.Read(time.Until(deadline))
		if err != nil {
			return Ended{}, err
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			if f.ErrCode != http2.ErrCodeNo {
				return Ended{ID: f.StreamID, RST: f.ErrCode}, nil
			}
		case *http2.HeadersFrame:
			fields, err := c.dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				return Ended{}, err
			}
			for _, hf := range fields {
				if hf.Name == "grpc-status" {
					return Ended{ID: f.StreamID, Status: hf.Value}, nil
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.Fr.WritePing(true, f.Data)
			}
		case *http2.GoAwayFrame:
			return Ended{}, fmt.Errorf("GOAWAY %v while waiting for a stream to end", f.ErrCode)
		}
	}
}
