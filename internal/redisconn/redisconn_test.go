package redisconn

import (
	"reflect"
	"testing"

	"github.com/hibiken/asynq"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want asynq.RedisConnOpt
	}{
		{"redis://localhost:6379/0", asynq.RedisClientOpt{Addr: "localhost:6379"}},
		{"redis://cache", asynq.RedisClientOpt{Addr: "cache:6379"}},
		{"redis://app:s3cret@cache:6380/4", asynq.RedisClientOpt{Addr: "cache:6380", Username: "app", Password: "s3cret", DB: 4}},
		{"redis-sentinel://:pw@10.0.0.1:26379,10.0.0.2,[::1]:5000/2?master=mymaster&sentinel_password=spw",
			asynq.RedisFailoverClientOpt{
				MasterName:       "mymaster",
				SentinelAddrs:    []string{"10.0.0.1:26379", "10.0.0.2:26379", "[::1]:5000"},
				SentinelPassword: "spw",
				Password:         "pw",
				DB:               2,
			}},
		{"redis-sentinel://s1:26379?master=m", asynq.RedisFailoverClientOpt{MasterName: "m", SentinelAddrs: []string{"s1:26379"}}},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Parse(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
	}

	tls, err := Parse("rediss://cache.example.com:6380")
	if err != nil {
		t.Fatal(err)
	}
	if c := tls.(asynq.RedisClientOpt).TLSConfig; c == nil || c.ServerName != "cache.example.com" {
		t.Errorf("rediss:// TLS config = %+v, want ServerName cache.example.com", c)
	}

	for _, bad := range []string{
		"http://localhost:6379",
		"localhost:6379",
		"redis://localhost:6379/zero",
		"redis:///0",
		"redis-sentinel://s1:26379,s2:26379",
		"redis-sentinel://?master=m",
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = nil error, want a refusal", bad)
		}
	}
}
