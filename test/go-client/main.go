// A grpc-go client of the plugin socket, dialled as Argo CD's repo-server dials it, for the
// tests (test/e2e/go-client.test.ts). The messages arrive pre-encoded (a raw codec: no
// generated code, no protoc), so it builds from Debian's golang-google-grpc-dev in GOPATH mode.
//
// Input (stdin, JSON): {"socket", "method", "stream", "messages": [base64], "timeoutMs",
// "cancelAfterMs", "cancelWhenFile", "keepaliveMs", "maxMsgBytes"}. With cancelWhenFile the
// cancel comes cancelAfterMs after that file appears (the plugin has started), not after the call. Output (stdout, JSON): {"code", "message",
// "responses": [base64]}.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

type input struct {
	Socket         string   `json:"socket"`
	Method         string   `json:"method"`
	Stream         bool     `json:"stream"`
	Messages       [][]byte `json:"messages"`
	TimeoutMs      int      `json:"timeoutMs"`
	CancelAfterMs  int      `json:"cancelAfterMs"`
	CancelWhenFile string   `json:"cancelWhenFile"`
	KeepaliveMs    int      `json:"keepaliveMs"`
	MaxMsgBytes    int      `json:"maxMsgBytes"`
}

type output struct {
	Code      int      `json:"code"`
	Message   string   `json:"message"`
	Responses [][]byte `json:"responses"`
}

// rawCodec passes the encoded protobuf through untouched.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "bad input:", err)
		os.Exit(2)
	}
	out := call(in)
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(2)
	}
}

func call(in input) output {
	max := in.MaxMsgBytes
	if max == 0 {
		max = 100 * 1024 * 1024
	}
	opts := []grpc.DialOption{
		grpc.WithInsecure(),
		grpc.WithBlock(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		}),
		// grpc-go >= 1.57 (Argo CD 2.7.15+, 2.8.5+, 2.10+) sends the socket path percent-encoded,
		// without its leading slash, as :authority; this older grpc-go is told to do the same.
		grpc.WithAuthority(url.PathEscape(strings.TrimPrefix(in.Socket, "/"))),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(max), grpc.MaxCallSendMsgSize(max), grpc.ForceCodec(rawCodec{})),
	}
	if in.KeepaliveMs > 0 {
		// The repo-server's client: Time = 2 x ARGOCD_GRPC_KEEP_ALIVE_MIN, no pings without streams.
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: time.Duration(in.KeepaliveMs) * time.Millisecond}))
	}
	dialCtx, cancelDial := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelDial()
	conn, err := grpc.DialContext(dialCtx, "passthrough:///"+in.Socket, opts...)
	if err != nil {
		return output{Code: -1, Message: "dial: " + err.Error()}
	}
	defer conn.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if in.TimeoutMs > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(in.TimeoutMs)*time.Millisecond)
		defer cancel()
	}
	if in.CancelWhenFile != "" {
		go func() {
			for {
				if _, err := os.Stat(in.CancelWhenFile); err == nil {
					break
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
			time.AfterFunc(time.Duration(in.CancelAfterMs)*time.Millisecond, cancel)
		}()
	} else if in.CancelAfterMs > 0 {
		time.AfterFunc(time.Duration(in.CancelAfterMs)*time.Millisecond, cancel)
	}
	out := output{Responses: [][]byte{}}
	if !in.Stream {
		req := []byte{}
		if len(in.Messages) > 0 {
			req = in.Messages[0]
		}
		var resp []byte
		err = conn.Invoke(ctx, in.Method, &req, &resp)
		if err == nil {
			out.Responses = append(out.Responses, resp)
		}
	} else {
		err = clientStream(ctx, conn, in, &out)
	}
	st := status.Convert(err)
	out.Code = int(st.Code())
	out.Message = st.Message()
	return out
}

func clientStream(ctx context.Context, conn *grpc.ClientConn, in input, out *output) error {
	desc := &grpc.StreamDesc{ClientStreams: true}
	stream, err := conn.NewStream(ctx, desc, in.Method)
	if err != nil {
		return err
	}
	for i := range in.Messages {
		if err := stream.SendMsg(&in.Messages[i]); err != nil {
			// io.EOF: the server ended the call; its status comes with RecvMsg.
			break
		}
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	var resp []byte
	if err := stream.RecvMsg(&resp); err != nil {
		return err
	}
	out.Responses = append(out.Responses, resp)
	return nil
}
