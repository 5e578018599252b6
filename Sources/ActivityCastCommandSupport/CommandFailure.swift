/// A failure while running a command (not a usage mistake): printed as `Error: …`, exit 1.
package struct CommandFailure: Error, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }
}
