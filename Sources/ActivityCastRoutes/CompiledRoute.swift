import ActivityCastCore

/// One route (or one variant of it) compiled for evaluation: every name already resolved to a
/// field slot, every text to a template, every value to a `ValueSpec`.
struct CompiledRoute: Sendable {
    /// Alternatives: the first whose field is present names the key.
    var keys: [(kind: ActivityKey.Kind, slot: Int)]
    var event: LiveActivityEvent?
    var priority: PriorityClass
    var contentState: [(key: String, value: ValueSpec)]
    var attributes: [(key: String, value: ValueSpec)]
    var attributesType: String?
    /// Start only: targets whose followers get the start; absent fields drop out.
    var followers: [(kind: FollowTarget.Kind, slot: Int)]
    var alert: CompiledAlert?
    var staleAfterSeconds: Int64?
    var dismissAfterSeconds: Int64?
    var relevanceScore: Double?

    func plan(_ values: FieldValues, storagePolicy: ChannelStoragePolicy) -> Result<Plan?, RouteError> {
        guard let key = keys.first(where: { values.present.contains($0.slot) }).map({
            ActivityKey(kind: $0.kind, id: String(decoding: values.bytes($0.slot), as: UTF8.self))
        }) else {
            let names = keys.map { "'\(values.table.name($0.slot))'" }.joined(separator: " or ")
            return .failure(RouteError(location: nil, reason: "\(values.table.type.name): no activity key: the entry has no \(names)"))
        }

        let audience: Audience
        switch event {
        case .start:
            var targets: [FollowTarget] = []
            for follower in followers where values.present.contains(follower.slot) {
                let target = FollowTarget(kind: follower.kind, id: String(decoding: values.bytes(follower.slot), as: UTF8.self))
                if !targets.contains(target) { targets.append(target) }
            }
            audience = targets.isEmpty ? .none : .followers(targets)
        case .update, .end:
            audience = .activity(key)
        case nil:
            audience = .none
        }

        let state: [String: JSONValue]
        switch ValueSpec.evaluate(contentState, values) {
        case .success(let value): state = value
        case .failure(let error): return .failure(error)
        }
        var attributeValues: [String: JSONValue] = [:]
        if !attributes.isEmpty {
            switch ValueSpec.evaluate(attributes, values) {
            case .success(let value): attributeValues = value
            case .failure(let error): return .failure(error)
            }
        }
        var planAlert: PlanAlert?
        if let alert {
            switch alert.render(values) {
            case .success(let value): planAlert = value
            case .failure(let error): return .failure(error)
            }
        }
        return .success(Plan(key: key, event: event, priority: priority, timestampMillis: values.timestampMillis,
                             audience: audience, contentState: state, attributes: attributeValues, alert: planAlert,
                             attributesType: attributesType, staleAfterSeconds: staleAfterSeconds,
                             dismissAfterSeconds: dismissAfterSeconds, relevanceScore: relevanceScore,
                             storagePolicy: storagePolicy))
    }
}

/// `aps.alert` as templates.
struct CompiledAlert: Sendable {
    var title: Template
    var body: Template
    var titleLocKey: Template?
    var titleLocArgs: [Template]
    var locKey: Template?
    var locArgs: [Template]
    var sound: Template?

    func render(_ values: FieldValues) -> Result<PlanAlert, RouteError> {
        func text(_ template: Template, _ name: String) -> Result<String, RouteError> {
            template.render(values).flatMap { rendered in
                guard let rendered else {
                    let missing = values.table.names(of: template.alternatives.last!.needs.subtracting(values.present))
                    return .failure(RouteError(location: nil, reason: "\(values.table.type.name): alert \(name) can't be "
                        + "rendered: the entry has no \(missing.map { "'\($0)'" }.joined(separator: ", "))"))
                }
                return .success(rendered)
            }
        }
        func optionalText(_ template: Template?, _ name: String) -> Result<String?, RouteError> {
            guard let template else { return .success(nil) }
            return text(template, name).map { $0 }
        }
        func texts(_ templates: [Template], _ name: String) -> Result<[String], RouteError> {
            var out: [String] = []
            out.reserveCapacity(templates.count)
            for (i, template) in templates.enumerated() {
                switch text(template, "\(name)[\(i)]") {
                case .success(let value): out.append(value)
                case .failure(let error): return .failure(error)
                }
            }
            return .success(out)
        }
        do throws(RouteError) {
            return .success(PlanAlert(title: try text(title, "title").get(), body: try text(body, "body").get(),
                                      titleLocKey: try optionalText(titleLocKey, "title-loc-key").get(),
                                      titleLocArgs: try texts(titleLocArgs, "title-loc-args").get(),
                                      locKey: try optionalText(locKey, "loc-key").get(),
                                      locArgs: try texts(locArgs, "loc-args").get(),
                                      sound: try optionalText(sound, "sound").get()))
        } catch {
            return .failure(error)
        }
    }
}

/// A routed entry type: its field table, its route, and the variants chosen by a field's value.
struct CompiledType: Sendable {
    let table: FieldTable
    let route: CompiledRoute
    /// The slot of the field whose value picks a variant (`moment`, `severity`), or nil.
    let variantSlot: Int?
    let variants: [(value: [UInt8], route: CompiledRoute)]

    @inline(__always)
    func select(_ values: FieldValues) -> CompiledRoute {
        guard let slot = variantSlot, values.present.contains(slot) else { return route }
        let value = values.bytes(slot)
        for variant in variants where variant.value == value { return variant.route }
        return route
    }
}
