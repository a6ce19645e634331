package collkit

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// LogEnv is the environment variable that turns on collkit's debug log, in
// the spirit of NCCL_DEBUG: WARN, INFO (each communicator's setup: rank,
// size, transport settings, node grouping, adaptive's choices) or DEBUG
// (connection events too). Unset or empty means silent. The log goes to
// stderr, or to the file named by COLLKIT_DEBUG_FILE ("%r" in the name is
// replaced by the rank's number from the environment).
const LogEnv = "COLLKIT_DEBUG"

// LoggerFromEnv returns the logger COLLKIT_DEBUG asks for: a discarding one
// when it is unset. An unknown level is an error naming the accepted ones.
func LoggerFromEnv(getenv func(string) string) (*slog.Logger, error) {
	v := strings.ToUpper(strings.TrimSpace(getenv(LogEnv)))
	var level slog.Level
	switch v {
	case "", "OFF", "NONE":
		return slog.New(slog.DiscardHandler), nil
	case "WARN":
		level = slog.LevelWarn
	case "INFO", "VERSION":
		level = slog.LevelInfo
	case "DEBUG", "TRACE":
		level = slog.LevelDebug
	default:
		return nil, fmt.Errorf("%s=%q: want WARN, INFO or DEBUG (or unset for silence)", LogEnv, getenv(LogEnv))
	}
	var w io.Writer = os.Stderr
	if name := getenv("COLLKIT_DEBUG_FILE"); name != "" {
		rank := getenv("RANK")
		if rank == "" {
			rank = getenv("OMPI_COMM_WORLD_RANK")
		}
		f, err := os.OpenFile(strings.ReplaceAll(name, "%r", rank), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("COLLKIT_DEBUG_FILE: %w", err)
		}
		w = f
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})), nil
}
