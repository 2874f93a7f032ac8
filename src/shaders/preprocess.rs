//! The WGSL preprocessor: one entry file and a variant's defines in, one WGSL module out.
//!
//! Every shader is a complete WGSL file in `shaders/<family>/` that declares its own
//! bindings; what several share lives in `shaders/shared/` and is pulled in by name. The
//! directives, each alone on its line (leading whitespace allowed):
//!
//! | directive | effect |
//! |---|---|
//! | `#import shared/name` | the text of `shaders/shared/name.wgsl`, preprocessed with the same defines |
//! | `#ifdef NAME` / `#ifndef NAME` | keep the lines up to the matching `#else` or `#endif` only if the variant defines (does not define) `NAME` |
//! | `#else`, `#endif` | as in C; blocks nest |
//! | `#{NAME}` (anywhere in a kept line) | the value the variant gives `NAME` |
//!
//! A file is imported once per shader: a second `#import` of it expands to nothing, so a
//! fragment can import what it uses without its includers tracking the order. Anything
//! else that starts a line with `#`, an unknown import, an undefined `#{NAME}` and an
//! unbalanced block are errors that name the file and line (the shipped shaders are all
//! expanded by a test, so a user never meets one).
//!
//! The syntax follows vello's `#import` / `#ifdef` and Bevy's `#{NAME}` values: no
//! expressions, no macros; what a variant changes is visible where it changes.
//!
//! ```text
//! #ifdef VEC4                          with VEC4 and N = 4:
//! alias Elem = vec4<f32>;                alias Elem = vec4<f32>;
//! #else                                  const N: u32 = 4u;
//! alias Elem = f32;
//! #endif
//! const N: u32 = #{N}u;
//! ```

use std::collections::HashSet;

/// A variant's define: a name, and the value `#{NAME}` takes (`""` for a plain flag).
pub(crate) type Define = (&'static str, &'static str);

/// What went wrong expanding a shader, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PreprocessError {
    /// The file (`shaders/`-relative) and 1-based line.
    pub(crate) at: String,
    /// What the directive asked and what was missing.
    pub(crate) message: String,
}

impl std::fmt::Display for PreprocessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

impl std::error::Error for PreprocessError {}

/// Expands `text` (the file `path`) for a variant with `defines`; `imports` gives the text
/// of a `shared/...` import by name.
pub(crate) fn expand(
    path: &str,
    text: &str,
    defines: &[Define],
    imports: &dyn Fn(&str) -> Option<&'static str>,
) -> Result<String, PreprocessError> {
    let mut out = String::with_capacity(text.len() * 2);
    let mut seen = HashSet::new();
    Expander {
        defines,
        imports,
        seen: &mut seen,
    }
    .file(path, text, &mut out)?;
    Ok(out)
}

struct Expander<'a> {
    defines: &'a [Define],
    imports: &'a dyn Fn(&str) -> Option<&'static str>,
    /// Files already expanded into this shader (imports take effect once).
    seen: &'a mut HashSet<String>,
}

/// One open `#ifdef`/`#ifndef` block.
struct Block {
    /// Whether its current branch keeps lines (before counting the enclosing blocks).
    taken: bool,
    /// Whether `#else` has been seen.
    in_else: bool,
    /// Where it opened, for an unclosed block's error.
    line: usize,
}

impl Expander<'_> {
    fn file(&mut self, path: &str, text: &str, out: &mut String) -> Result<(), PreprocessError> {
        self.seen.insert(path.to_string());
        let mut blocks: Vec<Block> = Vec::new();
        let at = |line: usize| format!("shaders/{path}:{line}");
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let keep = blocks.iter().all(|b| b.taken);
            let trimmed = line.trim_start();
            let Some(directive) = trimmed.strip_prefix('#').filter(|d| !d.starts_with('{')) else {
                if keep {
                    out.push_str(&self.substitute(line).map_err(|message| PreprocessError {
                        at: at(number),
                        message,
                    })?);
                    out.push('\n');
                }
                continue;
            };
            let (word, rest) = directive
                .split_once(char::is_whitespace)
                .map_or((directive, ""), |(w, r)| (w, r.trim()));
            let error = |message: String| PreprocessError {
                at: at(number),
                message,
            };
            match word {
                "ifdef" | "ifndef" => {
                    if rest.is_empty() {
                        return Err(error(format!("#{word} needs a name")));
                    }
                    let defined = self.defines.iter().any(|(name, _)| *name == rest);
                    blocks.push(Block {
                        taken: defined == (word == "ifdef"),
                        in_else: false,
                        line: number,
                    });
                }
                "else" => match blocks.last_mut() {
                    Some(block) if !block.in_else => {
                        block.in_else = true;
                        block.taken = !block.taken;
                    }
                    Some(_) => return Err(error("a second #else in one block".into())),
                    None => return Err(error("#else outside any #ifdef".into())),
                },
                "endif" => {
                    if blocks.pop().is_none() {
                        return Err(error("#endif outside any #ifdef".into()));
                    }
                }
                "import" => {
                    if !keep {
                        continue;
                    }
                    let file = format!("{rest}.wgsl");
                    if self.seen.contains(&file) {
                        continue;
                    }
                    let Some(imported) = (self.imports)(rest) else {
                        return Err(error(format!(
                            "#import {rest}: no such fragment (fragments live in \
                             shaders/shared/ and are listed in src/shaders/mod.rs)"
                        )));
                    };
                    self.file(&file, imported, out)?;
                }
                other => {
                    return Err(error(format!(
                        "unknown directive #{other} (known: import, ifdef, ifndef, else, endif)"
                    )))
                }
            }
        }
        match blocks.last() {
            Some(block) => Err(PreprocessError {
                at: at(block.line),
                message: "this block has no #endif".into(),
            }),
            None => Ok(()),
        }
    }

    /// `line` with every `#{NAME}` replaced by the variant's value.
    fn substitute(&self, line: &str) -> Result<String, String> {
        let mut out = String::with_capacity(line.len());
        let mut rest = line;
        while let Some(start) = rest.find("#{") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                return Err(format!("`#{{` without a closing `}}` in `{}`", line.trim()));
            };
            let name = &after[..end];
            let Some((_, value)) = self.defines.iter().find(|(n, _)| *n == name) else {
                return Err(format!(
                    "#{{{name}}} is not defined by this variant (it defines: {})",
                    self.defines
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            };
            out.push_str(value);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imports(name: &str) -> Option<&'static str> {
        match name {
            "shared/a" => Some("#import shared/b\nfn a() {}\n"),
            "shared/b" => Some("fn b() {}\n"),
            "shared/c" => Some("#ifdef X\nconst C: u32 = #{X}u;\n#endif\n"),
            _ => None,
        }
    }

    fn run(text: &str, defines: &[Define]) -> Result<String, PreprocessError> {
        expand("t.wgsl", text, defines, &imports)
    }

    #[test]
    fn imports_expand_once_in_first_use_order() {
        let out = run(
            "#import shared/a\n#import shared/b\n#import shared/a\nfn main() {}\n",
            &[],
        )
        .unwrap();
        assert_eq!(out, "fn b() {}\nfn a() {}\nfn main() {}\n");
    }

    #[test]
    fn blocks_nest_and_else_flips_only_its_own_block() {
        let text =
            "#ifdef A\n#ifndef B\na_not_b\n#else\na_and_b\n#endif\n#else\nnot_a\n#endif\nall\n";
        assert_eq!(run(text, &[]).unwrap(), "not_a\nall\n");
        assert_eq!(run(text, &[("A", "")]).unwrap(), "a_not_b\nall\n");
        assert_eq!(
            run(text, &[("A", ""), ("B", "")]).unwrap(),
            "a_and_b\nall\n"
        );
    }

    #[test]
    fn imports_see_the_variant_and_skipped_imports_stay_unseen() {
        let text = "#ifdef Y\n#import shared/c\n#endif\n#import shared/c\n";
        assert_eq!(run(text, &[("X", "7")]).unwrap(), "const C: u32 = 7u;\n");
    }

    #[test]
    fn values_substitute_anywhere_in_a_line() {
        let out = run(
            "const A: u32 = #{N}u; // #{N} of #{M}\n",
            &[("N", "8"), ("M", "x")],
        );
        assert_eq!(out.unwrap(), "const A: u32 = 8u; // 8 of x\n");
    }

    #[test]
    fn every_mistake_names_its_file_and_line() {
        let cases = [
            ("x\n#import shared/nope\n", "t.wgsl:2", "no such fragment"),
            ("#ifdef A\n", "t.wgsl:1", "no #endif"),
            ("#endif\n", "t.wgsl:1", "outside"),
            (
                "#ifdef A\n#else\n#else\n#endif\n",
                "t.wgsl:3",
                "second #else",
            ),
            ("#define A\n", "t.wgsl:1", "unknown directive #define"),
            ("\n\nconst A = #{N};\n", "t.wgsl:3", "#{N} is not defined"),
            ("#ifdef\n", "t.wgsl:1", "needs a name"),
        ];
        for (text, at, message) in cases {
            let e = run(text, &[]).unwrap_err();
            assert!(e.at.ends_with(at), "{text:?}: {e}");
            assert!(e.message.contains(message), "{text:?}: {e}");
        }
    }
}
