package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// readmeBlock is one fenced code block of README.md, as a Markdown renderer
// reads it.
type readmeBlock struct {
	Lang      string   // the info string's first word: "console", "sh", ...
	Line      int      // the 1-based line of its opening fence
	Lines     []string // its content, without the fences
	Directive string   // the text of a <!-- session: ... --> comment just before it ("" if none)
}

// sessionDirectiveRE is the HTML comment by which README.md tells the
// sessions test how to run the console block that follows it.
var sessionDirectiveRE = regexp.MustCompile(`^<!--\s*session:\s*(.*?)\s*-->$`)

// readREADME returns the repository's README.md.
func readREADME(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readmeBlocks parses README.md with a CommonMark parser and returns its
// fenced code blocks in order, each with the session directive before it.
func readmeBlocks(src []byte) []readmeBlock {
	doc := goldmark.New().Parser().Parse(text.NewReader(src))
	lineOf := func(offset int) int { return bytes.Count(src[:offset], []byte("\n")) + 1 }
	var blocks []readmeBlock
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		fb, ok := n.(*ast.FencedCodeBlock)
		if !entering || !ok {
			return ast.WalkContinue, nil
		}
		b := readmeBlock{Lang: string(fb.Language(src))}
		lines := fb.Lines()
		for i := 0; i < lines.Len(); i++ {
			seg := lines.At(i)
			b.Lines = append(b.Lines, strings.TrimRight(string(seg.Value(src)), "\n"))
		}
		// The opening fence is the line above the first content line (or,
		// for an empty block, the line of the info string).
		switch {
		case lines.Len() > 0:
			b.Line = lineOf(lines.At(0).Start) - 1
		case fb.Info != nil:
			b.Line = lineOf(fb.Info.Segment.Start)
		}
		if prev, ok := fb.PreviousSibling().(*ast.HTMLBlock); ok {
			var html strings.Builder
			for i := 0; i < prev.Lines().Len(); i++ {
				seg := prev.Lines().At(i)
				html.Write(seg.Value(src))
			}
			if m := sessionDirectiveRE.FindStringSubmatch(strings.TrimSpace(html.String())); m != nil {
				b.Directive = m[1]
			}
		}
		blocks = append(blocks, b)
		return ast.WalkContinue, nil
	})
	return blocks
}

// fenceLineRE is a line that opens or closes a fenced code block.
var fenceLineRE = regexp.MustCompile("^\\s*```[A-Za-z0-9_-]*\\s*$")

// Every code fence of README.md stands on a line of its own: a closing
// fence glued to the code before it (`}```) does not close the block, and
// everything after it, headings and tables included, renders as code.
func TestREADMEFencesStandAlone(t *testing.T) {
	src := readREADME(t)
	blocks := readmeBlocks(src)
	for _, b := range blocks {
		for i, l := range b.Lines {
			if strings.Contains(l, "```") {
				t.Errorf("README.md:%d: the code block opened here contains a fence glued to other text on its line %d, %q: "+
					"put every fence on a line of its own", b.Line, b.Line+1+i, l)
			}
		}
	}
	fences := 0
	for i, l := range strings.Split(string(src), "\n") {
		switch {
		case fenceLineRE.MatchString(l):
			fences++
		case strings.Contains(l, "```"):
			t.Errorf("README.md:%d: %q has a fence that is not on a line of its own", i+1, l)
		}
	}
	if fences != 2*len(blocks) {
		t.Errorf("README.md has %d fence lines for %d code blocks: every block needs an opening and a closing fence", fences, len(blocks))
	}
}
