// Command gendocs writes the manual pages and the bash completion that the
// Debian package ships, from the programs themselves so they cannot drift:
//
//   - leasekeeper(8) and one page per subcommand (leasekeeper-agent(8), …)
//     from the cobra command tree of internal/cli;
//   - leasekeeper-hook(8) from the hook's --help text (the hook is not
//     cobra: it imports only the standard library), given with -hook-help;
//   - the bash completion script, cobra's GenBashCompletionV2;
//   - with -licenses, the license texts of the Go modules and the Go
//     standard library linked into the given binaries (read from their
//     build information and the module cache): the binaries are static
//     builds of that code, and its licenses ask that they travel with it.
//
// Usage:
//
//	gendocs -out DIR [-version V] [-hook-help FILE] [-licenses BIN,BIN]
//
// It writes DIR/man/*.8, DIR/bash-completion/leasekeeper and
// DIR/THIRD-PARTY-LICENSES. The pages'
// date is SOURCE_DATE_EPOCH when set (dpkg-buildpackage sets it from
// debian/changelog), so builds are reproducible.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cpuguy83/go-md2man/v2/md2man"
	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/internal/cli"
)

func main() {
	if err := run(os.Args[1:], os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}

func run(args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet("gendocs", flag.ContinueOnError)
	out := fs.String("out", "", "output directory (required)")
	version := fs.String("version", "dev", "version printed in the pages' footer")
	hookHelp := fs.String("hook-help", "", `file holding "leasekeeper-hook --help" output; "" = no hook page`)
	licenses := fs.String("licenses", "", `comma-separated binaries whose linked modules' licenses to collect; "" = none`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		return errors.New("usage: gendocs -out DIR [-version V] [-hook-help FILE]")
	}
	date, err := pageDate(getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return err
	}
	h := header{Date: date.Format("January 2006"), Source: "leasekeeper " + *version}

	root := cli.New(cli.Env{Version: *version, Stdout: io.Discard, Stderr: io.Discard})
	root.InitDefaultVersionFlag() // cobra adds it only when the command runs
	root.InitDefaultCompletionCmd()
	manDir := filepath.Join(*out, "man")
	if err := os.MkdirAll(manDir, 0o755); err != nil {
		return err
	}
	if err := writeCommandPages(root, manDir, h); err != nil {
		return err
	}
	if *hookHelp != "" {
		help, err := os.ReadFile(*hookHelp)
		if err != nil {
			return err
		}
		page, err := hookPage(string(help), h)
		if err != nil {
			return fmt.Errorf("%s: %w", *hookHelp, err)
		}
		if err := os.WriteFile(filepath.Join(manDir, "leasekeeper-hook.8"), page, 0o644); err != nil {
			return err
		}
	}

	var comp bytes.Buffer
	if err := root.GenBashCompletionV2(&comp, true); err != nil {
		return err
	}
	compDir := filepath.Join(*out, "bash-completion")
	if err := os.MkdirAll(compDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(compDir, "leasekeeper"), comp.Bytes(), 0o644); err != nil {
		return err
	}
	if *licenses != "" {
		text, err := thirdPartyLicenses(strings.Split(*licenses, ","), getenv)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(*out, "THIRD-PARTY-LICENSES"), text, 0o644)
	}
	return nil
}

// pageDate is SOURCE_DATE_EPOCH (https://reproducible-builds.org/specs/source-date-epoch/)
// or, without it, now.
func pageDate(epoch string) (time.Time, error) {
	if epoch == "" {
		return time.Now().UTC(), nil
	}
	s, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", epoch, err)
	}
	return time.Unix(s, 0).UTC(), nil
}

// header is the .TH line's date and source fields.
type header struct {
	Date, Source string
}

// manual is the .TH line's manual field for section 8.
const manual = "System Manager's Manual"

func (h header) title(name string) string {
	return fmt.Sprintf("%% %q \"8\" %q %q %q\n\n", strings.ToUpper(name), h.Date, h.Source, manual)
}

// documented reports whether a command gets a page: not help, not hidden,
// not cobra's completion generator (the package ships the bash script).
func documented(c *cobra.Command) bool {
	return c.IsAvailableCommand() && c.Name() != "help" && c.Name() != "completion"
}

// pageName is a command's page: "leasekeeper deadletter list" is
// leasekeeper-deadletter-list.
func pageName(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "-")
}

func writeCommandPages(c *cobra.Command, dir string, h header) error {
	page := md2man.Render([]byte(commandMarkdown(c, h)))
	if err := os.WriteFile(filepath.Join(dir, pageName(c)+".8"), page, 0o644); err != nil {
		return err
	}
	for _, sub := range c.Commands() {
		if !documented(sub) {
			continue
		}
		if err := writeCommandPages(sub, dir, h); err != nil {
			return err
		}
	}
	return nil
}

// commandMarkdown is the page of one command, in the markdown go-md2man
// reads.
func commandMarkdown(c *cobra.Command, h header) string {
	var b strings.Builder
	b.WriteString(h.title(pageName(c)))
	fmt.Fprintf(&b, "# NAME\n\n%s \\- %s\n\n", pageName(c), escape(c.Short))

	b.WriteString("# SYNOPSIS\n\n")
	if c.Runnable() {
		fmt.Fprintf(&b, "**%s**\n\n", escape(c.UseLine()))
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(&b, "**%s** *command* [*flags*]\n\n", escape(c.CommandPath()))
	}

	b.WriteString("# DESCRIPTION\n\n")
	desc := c.Long
	if desc == "" {
		desc = c.Short
	}
	b.WriteString(prose(desc))

	if c.HasAvailableSubCommands() {
		b.WriteString("# COMMANDS\n\n")
		for _, sub := range c.Commands() {
			if documented(sub) {
				fmt.Fprintf(&b, "**%s**\n: %s (see **%s**(8))\n\n", escape(sub.Name()), escape(sub.Short), pageName(sub))
			}
		}
	}
	if fl := c.NonInheritedFlags(); fl.HasAvailableFlags() {
		b.WriteString("# OPTIONS\n\n")
		b.WriteString(block(fl.FlagUsages()))
	}
	if fl := c.InheritedFlags(); fl.HasAvailableFlags() {
		b.WriteString("# OPTIONS INHERITED FROM PARENT COMMANDS\n\n")
		b.WriteString(block(fl.FlagUsages()))
	}
	if c.Example != "" {
		b.WriteString("# EXAMPLES\n\n")
		b.WriteString(block(c.Example))
	}
	if !c.HasParent() {
		b.WriteString("# FILES\n\n")
		b.WriteString("*/etc/leasekeeper/leasekeeper.toml*\n: the agent's configuration: what a rack sets (the region's URL, empty: a MAAS rack gives it).\n\n*/usr/share/doc/leasekeeper/examples/leasekeeper.toml*\n: every key, with its default and what it does (also printed by **leasekeeper agent --print-reference**).\n\n")
		b.WriteString("*/run/leasekeeper/hook.sock*\n: the socket **leasekeeper-hook**(8) sends lease events to.\n\n")
		b.WriteString("*/var/spool/leasekeeper*\n: where the hook appends events while the agent is down.\n\n")
		b.WriteString("*/var/lib/leasekeeper*\n: the agent's durable outbox, lease table and dead letters.\n\n")
		b.WriteString("*/usr/share/doc/leasekeeper/metrics.md.gz*\n: every metric the agent serves on **metrics.listen**'s /metrics.\n\n")
		b.WriteString("*/usr/share/doc/leasekeeper/examples/prometheus/leasekeeper-alerts.yml*\n: Prometheus alerting rules on them.\n\n")
	}

	b.WriteString("# SEE ALSO\n\n")
	var see []string
	if c.HasParent() {
		see = append(see, "**"+pageName(c.Parent())+"**(8)")
	}
	for _, sub := range c.Commands() {
		if documented(sub) {
			see = append(see, "**"+pageName(sub)+"**(8)")
		}
	}
	if !c.HasParent() {
		see = append(see, "**leasekeeper-hook**(8)", "**dhcpd**(8)", "**dhcpd.conf**(5)", "**dhcpd.leases**(5)")
	}
	b.WriteString(strings.Join(see, ", ") + "\n")
	return b.String()
}

// hookPage turns the hook's --help text into its manual page. The text
// is: "Usage: " and the synopsis lines, a blank line, description
// paragraphs, an indented option list, and closing paragraphs.
func hookPage(help string, h header) ([]byte, error) {
	help = strings.TrimRight(help, "\n") + "\n"
	usage, rest, ok := strings.Cut(help, "\n\n")
	if !ok || !strings.HasPrefix(usage, "Usage: ") {
		return nil, errors.New(`no "Usage: " paragraph`)
	}
	var b strings.Builder
	b.WriteString(h.title("leasekeeper-hook"))
	b.WriteString("# NAME\n\nleasekeeper-hook \\- hand lease events from ISC dhcpd to the leasekeeper agent; clean its leases file (maas-dhcp-helper)\n\n")
	b.WriteString("# SYNOPSIS\n\n")
	// Every synopsis line loses the indent "Usage: " gave it.
	b.WriteString(block(strings.ReplaceAll(strings.TrimPrefix(usage, "Usage: "), "\n       ", "\n")))
	b.WriteString("# DESCRIPTION\n\n")
	b.WriteString(prose(rest))
	b.WriteString("# ENVIRONMENT\n\n")
	b.WriteString("*LEASEKEEPER_SOCKET*\n: the socket when --socket is not given.\n\n")
	b.WriteString("*LEASEKEEPER_SPOOL*\n: the spool directory when --spool is not given.\n\n")
	b.WriteString("# FILES\n\n")
	b.WriteString("*/etc/dhcp/leasekeeper.conf*, */etc/dhcp/leasekeeper6.conf*\n: dhcpd.conf snippets that run the hook on commit, expiry and release (include them at the global scope).\n\n")
	b.WriteString("*/etc/apparmor.d/dhcpd.d/leasekeeper*\n: lets the AppArmor-confined dhcpd run the hook.\n\n")
	b.WriteString("# SEE ALSO\n\n**leasekeeper**(8), **leasekeeper-agent**(8), **dhcpd.conf**(5)\n")
	return md2man.Render([]byte(b.String())), nil
}

// prose renders help text: paragraphs as paragraphs, and a paragraph with
// indented lines (a table of signals, a list of options, an example) as
// preformatted text, as it reads in the terminal.
func prose(text string) string {
	var b strings.Builder
	for _, p := range strings.Split(strings.TrimSpace(text), "\n\n") {
		p = strings.Trim(p, "\n")
		if p == "" {
			continue
		}
		indented := false
		for _, l := range strings.Split(p, "\n") {
			if strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t") {
				indented = true
			}
		}
		if indented {
			b.WriteString(block(p))
			continue
		}
		b.WriteString(escape(p) + "\n\n")
	}
	return b.String()
}

// block is text set as it is (a fenced code block: no markdown inside).
func block(text string) string {
	return "```\n" + strings.TrimRight(strings.ReplaceAll(text, "\t", "    "), "\n ") + "\n```\n\n"
}

// escape keeps markdown from reading help text as markup.
func escape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, "*", `\*`, "_", `\_`, "`", "\\`", "[", `\[`, "]", `\]`, "<", `\<`, ">", `\>`, "#", `\#`)
	return r.Replace(s)
}
