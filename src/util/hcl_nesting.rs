//! A guard against nesting too deep to parse: the HCL parser and the evaluator recurse once
//! per level of brackets, blocks, strings with interpolations and unary operators, so a file
//! of a few kilobytes like `a = ((((…1))))` would overflow a thread's stack and abort the
//! whole agent (found by the `hcl_job` fuzz target). [`too_deep`] scans the text once, before
//! the parser sees it, and reports where it first goes past [`MAX_NESTING`].
//!
//! The scan follows HCL's lexical structure closely enough to count what nests: `(` `[` `{`
//! in code; quoted strings and heredocs with their `${…}` and `%{…}` interpolations (which
//! hold code again); comments (`#`, `//`, `/* */`) and escapes are skipped; runs of the
//! unary operators `-` and `!` count as one level each.

/// The deepest nesting a job file or ACL policy may have. Real job files stay under 15.
pub const MAX_NESTING: usize = 64;

/// What an open construct returns to when it closes.
#[derive(Debug, Clone, PartialEq)]
enum Frame {
    /// `(`, `[` or `{` in code.
    Bracket,
    /// A quoted string.
    Quoted,
    /// A heredoc ending at a line that is `marker` (after leading spaces).
    Heredoc(String),
    /// `${` or `%{` inside a string or heredoc: code until its `}`.
    Interpolation,
}

/// What the scan found wrong.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// Nesting deeper than the limit, first at this byte offset.
    TooDeep(usize),
    /// A bracket, string, heredoc or interpolation opened at this offset never closes.
    Unclosed(usize, &'static str),
}

/// The first [`Problem`] of `text`, if any. An unclosed construct is reported here because
/// the parser backtracks through every open bracket before it gives up, which takes
/// exponential time on a few kilobytes of unclosed brackets (also found by `hcl_job`).
pub fn scan(text: &str, limit: usize) -> Option<Problem> {
    let mut opened: Vec<usize> = Vec::new();
    let r = scan_with(text, limit, &mut opened);
    if r.is_some() {
        return r;
    }
    opened.last().map(|&at| {
        let what = match text.as_bytes().get(at) {
            Some(b'(') => "`(`",
            Some(b'[') => "`[`",
            Some(b'{') => "`{`",
            Some(b'"') => "string",
            Some(b'<') => "heredoc",
            _ => "interpolation",
        };
        Problem::Unclosed(at, what)
    })
}

/// The byte offset where `text` first nests deeper than `limit`, if it does.
#[cfg(test)]
pub fn too_deep(text: &str, limit: usize) -> Option<usize> {
    match scan_with(text, limit, &mut Vec::new()) {
        Some(Problem::TooDeep(at)) => Some(at),
        _ => None,
    }
}

fn scan_with(text: &str, limit: usize, opened: &mut Vec<usize>) -> Option<Problem> {
    let bytes = text.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut unary_run = 0usize;
    let mut i = 0;
    let in_code = |stack: &[Frame]| {
        matches!(
            stack.last(),
            None | Some(Frame::Bracket) | Some(Frame::Interpolation)
        )
    };
    while i < bytes.len() {
        let b = bytes[i];
        let next = bytes.get(i + 1).copied();
        if in_code(&stack) {
            match b {
                b'#' => i = line_end(bytes, i),
                b'/' if next == Some(b'/') => i = line_end(bytes, i),
                b'/' if next == Some(b'*') => {
                    i = text[i + 2..]
                        .find("*/")
                        .map_or(bytes.len(), |at| i + 2 + at + 2);
                    continue;
                }
                b'(' | b'[' | b'{' => {
                    stack.push(Frame::Bracket);
                    opened.push(i);
                }
                b')' | b']' | b'}' => {
                    stack.pop();
                    opened.pop();
                }
                b'"' => {
                    stack.push(Frame::Quoted);
                    opened.push(i);
                }
                b'<' if next == Some(b'<') => {
                    if let Some((marker, body)) = heredoc_start(bytes, i) {
                        stack.push(Frame::Heredoc(marker));
                        opened.push(i);
                        unary_run = 0;
                        if stack.len() > limit {
                            return Some(Problem::TooDeep(i));
                        }
                        i = body;
                        continue;
                    }
                }
                b'-' | b'!' => {
                    unary_run += 1;
                    if stack.len() + unary_run > limit {
                        return Some(Problem::TooDeep(i));
                    }
                }
                _ => {}
            }
            if !b.is_ascii_whitespace() && b != b'-' && b != b'!' {
                unary_run = 0;
            }
        } else {
            match (stack.last(), b) {
                (Some(Frame::Quoted), b'\\') => i += 1,
                (Some(Frame::Quoted), b'"') => {
                    stack.pop();
                    opened.pop();
                }
                (_, b'$' | b'%') if next == Some(b) && bytes.get(i + 2) == Some(&b'{') => {
                    // `$${` and `%%{` are literal.
                    i += 2;
                }
                (_, b'$' | b'%') if next == Some(b'{') => {
                    stack.push(Frame::Interpolation);
                    opened.push(i);
                    i += 1;
                }
                (Some(Frame::Heredoc(marker)), b'\n') => {
                    let end = line_end(bytes, i + 1);
                    if text[i + 1..end].trim() == marker {
                        stack.pop();
                        opened.pop();
                        i = end;
                    }
                }
                _ => {}
            }
        }
        if stack.len() > limit {
            return Some(Problem::TooDeep(i));
        }
        i += 1;
    }
    None
}

/// The offset of the newline ending the line at `i` (or the end of the text).
fn line_end(bytes: &[u8], i: usize) -> usize {
    bytes[i..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(bytes.len(), |at| i + at)
}

/// A heredoc opening at `i` (`<<MARKER` or `<<-MARKER`, then the end of the line): its
/// marker and where its body starts.
fn heredoc_start(bytes: &[u8], i: usize) -> Option<(String, usize)> {
    let mut j = i + 2;
    if bytes.get(j) == Some(&b'-') {
        j += 1;
    }
    let start = j;
    while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_') {
        j += 1;
    }
    if j == start {
        return None;
    }
    let marker = String::from_utf8_lossy(&bytes[start..j]).into_owned();
    let end = line_end(bytes, j);
    if !bytes[j..end].iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    Some((marker, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(open: &str, inner: &str, close: &str, n: usize) -> String {
        format!(
            "locals {{\n  a = {}{inner}{}\n}}\n",
            open.repeat(n),
            close.repeat(n)
        )
    }

    #[test]
    fn counts_what_nests_and_skips_what_does_not() {
        for (text, deep) in [
            (nested("(", "1", ")", 70), true),
            (nested("[", "", "]", 70), true),
            (nested("{b = ", "1", "}", 70), true),
            (nested("-", "1", "", 70), true),
            (nested("!", "true", "", 70), true),
            (nested("\"${", "1", "}\"", 40), true),
            (nested("(", "1", ")", 60), false),
            // Brackets in strings, comments and heredocs are text, not nesting.
            (format!("a = \"{}\"\n", "(".repeat(200)), false),
            (format!("# {}\nb = 1\n", "[".repeat(200)), false),
            (format!("/* {} */ b = 1\n", "{".repeat(200)), false),
            (
                format!("s = <<EOT\n{}\nEOT\nb = [1]\n", "{".repeat(200)),
                false,
            ),
            (
                format!("s = <<-EOT\n  {}\n  EOT\nb = [1]\n", "(".repeat(200)),
                false,
            ),
            // An escaped quote does not end a string; `$${` is literal.
            (format!("a = \"\\\" {} $${{\"\n", "(".repeat(200)), false),
            // Subtraction is not a unary chain.
            ("a = 1 - 2 - 3 - 4\n".to_string(), false),
        ] {
            assert_eq!(
                too_deep(&text, MAX_NESTING).is_some(),
                deep,
                "{}",
                &text[..text.len().min(120)]
            );
        }
    }

    #[test]
    fn the_job_files_of_the_corpus_are_far_from_the_limit() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/jobs");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.to_string_lossy().ends_with(".nomad.hcl") {
                let text = std::fs::read_to_string(&path).unwrap();
                assert_eq!(too_deep(&text, 16), None, "{}", path.display());
                seen += 1;
            }
        }
        assert!(seen >= 20, "{seen}");
    }
}

#[cfg(test)]
mod unclosed {
    use super::*;

    #[test]
    fn an_unclosed_construct_is_found_where_it_opens() {
        assert_eq!(scan("a = [1, [2]\n", 64), Some(Problem::Unclosed(4, "`[`")));
        assert_eq!(
            scan("a = \"x ${y}\n", 64),
            Some(Problem::Unclosed(4, "string"))
        );
        assert_eq!(
            scan("a = <<EOT\nx\n", 64),
            Some(Problem::Unclosed(4, "heredoc"))
        );
        assert_eq!(scan("a = [1, [2]]\nb = \"${c}\"\n", 64), None);
    }
}
